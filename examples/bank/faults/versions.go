//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/ffgen/ffgen/examples/bank"
	v2 "github.com/ffgen/ffgen/examples/bank/internal/v2"
	"github.com/ffgen/ffgen/runtime"
)

// versionChecks is how many accounts checkVersions opens: enough that
// their owners fall on every node.
const versionChecks = 20

// checkVersions calls a cluster that runs both versions of the service
// with a client of each, as a thin client beside the load: writes of
// either version are taken (their arguments are the same in both), the
// method v2 added reaches a v2 node, the field v2 added is there when a
// v2 node answers and zero when a v1 node does, and the error v2 declared
// reaches a v1 client typed by its code. It retries for a while, since the
// thin client learns the upgraded nodes' methods from a membership poll.
func checkVersions(ctx context.Context, e *env) error {
	c, closeClient, err := e.thinClient(ctx, "versions", v1.AccountsDesc.Name)
	if err != nil {
		return err
	}
	defer closeClient()
	old, next := v1.NewAccountsClient(c), v2.NewAccountsClient(c)
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = versionRound(ctx, old, next); last == nil {
			e.note("both versions answered as each expects (%d accounts: writes of each, Exists, Currency, ErrInvalidID)", versionChecks)
			return nil
		}
	}
	return fmt.Errorf("a cluster running both versions: %w", last)
}

func versionRound(ctx context.Context, old *v1.AccountsClient, next *v2.AccountsClient) error {
	run := time.Now().UnixNano()
	for i := range versionChecks {
		id := fmt.Sprintf("versions-%d-%d", run, i)
		if _, err := old.Open(ctx, v1.OpenRequest{AccountID: id, Initial: 10}); err != nil {
			return fmt.Errorf("v1 Open(%s): %w", id, err)
		}
		b, err := next.Deposit(ctx, v2.DepositRequest{AccountID: id, Amount: 5})
		if err != nil || b.Amount != 15 {
			return fmt.Errorf("v2 Deposit(%s) = %+v, %v; want 15", id, b, err)
		}
		ok, err := next.Exists(ctx, id)
		if err != nil || !ok {
			return fmt.Errorf("v2 Exists(%s) = %v, %v; want true", id, ok, err)
		}
		b, err = next.Balance(ctx, id)
		// A v2 node sends the Currency, a v1 node knows no such field.
		if err != nil || b.Amount != 15 || (b.Currency != "" && b.Currency != v2.Currency) {
			return fmt.Errorf("v2 Balance(%s) = %+v, %v", id, b, err)
		}
	}
	// The v1 client asks for the empty ID: a v1 node answers
	// ErrUnknownAccount, a v2 node ErrInvalidID, which the v1 client does
	// not declare: a RemoteError that names it.
	_, err := old.Balance(ctx, "")
	var re *runtime.RemoteError
	if !errors.Is(err, v1.ErrUnknownAccount) && !(errors.As(err, &re) && re.Code == "ErrInvalidID") {
		return fmt.Errorf("v1 Balance(\"\"): %v; want ErrUnknownAccount or a RemoteError with code ErrInvalidID", err)
	}
	if _, err := next.Exists(ctx, ""); !errors.Is(err, v2.ErrInvalidID) {
		return fmt.Errorf("v2 Exists(\"\"): %v; want ErrInvalidID", err)
	}
	return nil
}
