// Package model is the validated description of one generated file: the
// service, its methods and every type the codec must carry. The generator
// builds it from go/types; the templates render it and never look at source.
package model

import (
	"go/token"
	"go/types"
	"time"

	"golang.org/x/tools/go/types/typeutil"
)

// File is one generated file; it holds exactly one service.
type File struct {
	Path    string // absolute path of the output file
	Source  string // base name of the file that declares the service
	Command string // the command line recorded in the header
	// Constraint is the build constraint of the source file, "" if none;
	// the generated file carries it.
	Constraint string
	Pkg        *types.Package // the package the file belongs to
	// Taken holds every package-scope name of Pkg that ffgen output does
	// not declare; generated unexported names avoid them.
	Taken map[string]bool
	// OtherServices are the names of the package's other services, which
	// other files hold.
	OtherServices []string
	Service       *Service
	// Schema is the schema the file records for the next generation to
	// be checked against: comment lines that go at its end.
	Schema string
}

// Service is one //ff:service interface.
type Service struct {
	Name    string // the interface name, e.g. "Accounts"
	Wire    string // the name on the wire, e.g. "bank.Accounts"
	Type    *types.Named
	Methods []*Method
	// Codec lists every type that needs its own encode and decode
	// function, in the order first reached (see NeedsHelper).
	Codec []types.Type
	// Numbers holds, per struct type of Codec, the field number of each of
	// its EncodedFields: what the schema recorded, or new ones.
	Numbers typeutil.Map // types.Type → []int
}

// FieldNumbers returns the field numbers of the struct type t, one per
// encoded field; 1, 2, ... when none are recorded.
func (s *Service) FieldNumbers(t types.Type) []int {
	if nums, ok := s.Numbers.At(t).([]int); ok {
		return nums
	}
	var nums []int
	for range EncodedFields(types.Unalias(t).Underlying().(*types.Struct)) {
		nums = append(nums, len(nums)+1)
	}
	return nums
}

// Mode mirrors runtime.Mode without importing the runtime.
type Mode int

const (
	Failover Mode = iota
	Scatter
	Hedge
)

// Method is one method of the service, embedded ones included.
type Method struct {
	Name     string
	Pos      token.Pos // of its declaration, for diagnostics
	Doc      []string  // doc comment lines, directives removed
	CtxName  string    // name of the context parameter ("" or "_" if none)
	Params   []*Var    // parameters after the context
	Results  []*Var    // results before the error
	ErrName  string    // name of the error result, if results are named
	Variadic bool

	Mode             Mode
	Hedge            time.Duration
	Hold             bool
	Linearizable     bool
	DefaultFailover  bool
	AttemptTimeout   time.Duration
	OperationTimeout time.Duration
	HeartbeatTimeout time.Duration
	MaxFailovers     *int

	Entities []*Entity
	Errors   []*ErrorRule

	// Schema is the method's identity at run time (runtime.MethodSchema),
	// derived from the recorded schema.
	Schema Schema
}

// Schema mirrors runtime.MethodSchema.
type Schema struct {
	Compat uint32 // raised when a break of the method is accepted
	Args   uint64 // fingerprint of what the arguments carry
	// Fields are the fields a replicated write's arguments can carry.
	Fields []string
}

// Var is a parameter or result; Name is "" or "_" when the source gives none.
type Var struct {
	Name string
	Type types.Type
}

// EntityKind is how an entity value becomes its string ID.
type EntityKind int

const (
	EntityString EntityKind = iota // string(x)
	EntityInt                      // strconv.FormatInt
	EntityUint                     // strconv.FormatUint
)

// Entity is a validated //ff:entity path.
type Entity struct {
	Text  string // as written, e.g. "req.AccountID"
	Param int    // index into Method.Params
	// Steps walk from the parameter to the value; a nil pointer met on the
	// way yields the empty entity ID.
	Steps []Step
	Kind  EntityKind
}

// Step is one move along an entity path: through a pointer, or into a field.
type Step struct {
	Deref bool   // the value is a pointer: check for nil, then dereference
	Field string // otherwise select this field
}

// ErrorRule is one error named by //ff:fail or //ff:failover.
type ErrorRule struct {
	Code     string // the name as written, e.g. "ErrBusy" or "*NotFoundError"
	Failover bool
	// Value is set for a package-level error value (a *types.Var or
	// *types.Const), matched with errors.Is.
	Value types.Object
	// Type is set for an error type, matched with errors.As; Pointer says
	// the error is *Type.
	Type    *types.Named
	Pointer bool
	Pos     token.Pos // where the directive names it, for diagnostics
}
