package pertype

import "github.com/ffgen/ffgen/runtime"

// Clients uses the generated names of both services.
func Clients(c *runtime.Client) (Reads, Writes) {
	return NewReadsClient(c), NewWritesClient(c)
}

// Register serves both services with one implementation of each.
func Register(s *runtime.Server, r Reads, w Writes) error {
	if err := RegisterReadsServer(s, r); err != nil {
		return err
	}
	return RegisterWritesServer(s, w)
}
