package bad_generic_errors

import "context"

type NotFound[K comparable] struct{ Key K }

func (e *NotFound[K]) Error() string { return "not found" }

//ff:service
type Index interface {
	//ff:entity name
	//ff:fail *NotFound *NotFound[Missing] *NotFound[chan int] *NotFound[string, int]
	Lookup(ctx context.Context, name string) error
}
