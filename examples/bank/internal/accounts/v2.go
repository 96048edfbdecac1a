//go:build bankv2

package accounts

import (
	"context"
	"fmt"

	bank "github.com/ffgen/ffgen/examples/bank/internal/v2"
)

// Version names the version of the service.
const Version = "v2"

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

// Cents is the kind of an opening balance: widened to an int64 in this
// version.
type Cents = int64

// Transfer is the request to move amount from one account to another
// under the payer's reference: bytes in this version. It leaves Memo,
// which this version added, empty: while a voter of the first version
// remains, a transfer that sets it is refused.
func Transfer(from, to string, amount int64, reference string) TransferRequest {
	return TransferRequest{From: from, To: to, Amount: amount, Reference: []byte(reference)}
}

// NewMethods calls Exists, which this version added, on an account it
// opened: it must say the account exists. Until a node of this version
// serves it, the call is refused (runtime.ErrUnimplemented, not executed).
func NewMethods(ctx context.Context, c *AccountsClient, id string) (called bool, err error) {
	ok, err := c.Exists(ctx, id)
	if err == nil && !ok {
		err = fmt.Errorf("Exists(%s) = false for an account opened before", id)
	}
	return true, err
}
