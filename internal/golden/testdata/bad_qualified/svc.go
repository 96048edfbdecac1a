// Package bad_qualified names a qualified error whose package the file
// does not import: the diagnostic names the error as written.
package bad_qualified

import "context"

//ff:service
type Files interface {
	//ff:entity name
	//ff:fail os.ErrNotExist
	Stat(ctx context.Context, name string) (int64, error)
}
