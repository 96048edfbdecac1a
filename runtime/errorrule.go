package runtime

import "errors"

// ErrorValue returns the rule for a declared error value: it matches any
// error that errors.Is target, sends no detail, and comes back on the client
// as target itself, so errors.Is holds across the wire.
func ErrorValue(code string, d Directive, target error) ErrorRule {
	return ErrorRule{
		Code:      code,
		Directive: d,
		Match:     func(err error) bool { return errors.Is(err, target) },
		Decode:    func(string, []byte) error { return target },
	}
}

// ErrorType returns the rule for a declared error type E, a pointer type
// (*NotFoundError) or a value type (LimitError): it matches any error in
// whose tree an E is found, as errors.As does, sends encode(e) as the
// detail, and comes back on the client as the E that decode rebuilds, so
// errors.As holds across the wire. encode must accept a nil pointer E.
//
// When decode fails, Decode returns a *DetailError: it keeps the remote
// message and unwraps to decode's error, but is not an E, since a partly
// decoded value would be a lie.
func ErrorType[E error](code string, d Directive, encode func(E) []byte, decode func(message string, detail []byte) (E, error)) ErrorRule {
	return ErrorRule{
		Code:      code,
		Directive: d,
		Match: func(err error) bool {
			// AsType is errors.As without the reflection and the escaping
			// target: a plain type assertion allocates nothing.
			_, ok := errors.AsType[E](err)
			return ok
		},
		Encode: func(err error) []byte {
			e, ok := errors.AsType[E](err)
			if !ok {
				return nil
			}
			return encode(e)
		},
		Decode: func(message string, detail []byte) error {
			e, err := decode(message, detail)
			if err != nil {
				return &DetailError{Code: code, Message: message, Err: err}
			}
			return e
		},
	}
}

// DetailError is the client's error for a declared error type whose detail
// did not decode: the remote error's message survives, the typed value does
// not.
type DetailError struct {
	Code    string // the declared error's code
	Message string // the remote error's text
	Err     error  // why the detail did not decode
}

func (e *DetailError) Error() string {
	return e.Message + " (" + e.Code + " detail undecodable: " + e.Err.Error() + ")"
}

func (e *DetailError) Unwrap() error { return e.Err }
