package bad_names

import "context"

//ff:service
type Ledger interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}

// LedgerClient takes a name ffgen generates.
type LedgerClient struct{}

func RegisterLedgerServer() {}
