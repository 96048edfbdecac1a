//go:build !bankv2

package main

import (
	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/runtime"
)

// serviceVersion names the version of the Accounts service this banknode
// serves; built with -tags bankv2 it serves the next one
// (examples/bank/internal/v2), for the mixed-version test.
const serviceVersion = "v1"

func registerAccounts(srv *runtime.Server, ledger *bank.Ledger) error {
	return bank.RegisterAccountsServer(srv, ledger)
}
