//go:build !bankv2

package accounts

import (
	"context"

	bank "github.com/ffgen/ffgen/examples/bank"
)

// Version names the version of the service.
const Version = "v1"

type (
	AccountsClient  = bank.AccountsClient
	Balance         = bank.Balance
	OpenRequest     = bank.OpenRequest
	DepositRequest  = bank.DepositRequest
	WithdrawRequest = bank.WithdrawRequest
	TransferRequest = bank.TransferRequest
)

var (
	AccountsDesc      = bank.AccountsDesc
	NewAccountsClient = bank.NewAccountsClient

	ErrInsufficientFunds = bank.ErrInsufficientFunds
	ErrUnknownAccount    = bank.ErrUnknownAccount
	ErrAccountClosed     = bank.ErrAccountClosed
	ErrAccountExists     = bank.ErrAccountExists
	ErrBalanceNotZero    = bank.ErrBalanceNotZero
	ErrInvalidRequest    = bank.ErrInvalidRequest
	ErrLedgerBusy        = bank.ErrLedgerBusy
)

// Cents is the kind of an opening balance: an int32 in this version.
type Cents = int32

// Transfer is the request to move amount from one account to another
// under the payer's reference: a string in this version.
func Transfer(from, to string, amount int64, reference string) TransferRequest {
	return TransferRequest{From: from, To: to, Amount: amount, Reference: reference}
}

// NewMethods calls what this version added on an account it opened; the
// first version added nothing.
func NewMethods(ctx context.Context, c *AccountsClient, id string) (called bool, err error) {
	return false, nil
}
