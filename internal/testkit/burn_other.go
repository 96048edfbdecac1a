//go:build !linux

package testkit

import (
	"errors"
	"fmt"
)

// Burners are processes that spin on the CPU (burn_linux.go); elsewhere
// than Linux there is no parent-death signal to keep one from outliving
// the measurement, and none is started.
type Burners struct{}

// Burn fails: see Burners.
func Burn(n int) (*Burners, error) {
	return nil, fmt.Errorf("%d CPU burners: %w on this system", n, errors.ErrUnsupported)
}

// Stop does nothing.
func (*Burners) Stop() {}
