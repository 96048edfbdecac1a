//go:build bankv2

package main

import (
	"github.com/ffgen/ffgen/examples/bank"
	v2 "github.com/ffgen/ffgen/examples/bank/internal/v2"
	"github.com/ffgen/ffgen/runtime"
)

// serviceVersion names the version of the Accounts service this banknode
// serves: the next one, over the same ledger.
const serviceVersion = "v2"

func registerAccounts(srv *runtime.Server, ledger *bank.Ledger) error {
	return v2.RegisterAccountsServer(srv, v2.Ledger{Ledger: ledger})
}
