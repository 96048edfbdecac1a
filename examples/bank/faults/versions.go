//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// either version are taken as long as they carry only fields every voter
// holds alike (a reference sent as a string or as bytes, an opening
// balance that fits the first version's int32), and refused, typed and not
// executed, when they set what a v1 voter would drop (v2's Memo) or
// cannot hold (an opening balance past an int32); the method v2 added
// reaches a v2 node, the result field v2 added is there when a v2 node
// answers and zero when a v1 node does, the one it removed the other way
// round, and the error v2 declared reaches a v1 client typed by its code. It retries for a while, since the
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
			e.note("both versions answered as each expects (%d accounts: writes of each, Exists, Currency, ErrInvalidID; a Reference as string and as bytes taken, a Memo and an Initial past int32 refused while v1 voters remain, AccountID empty from v2 nodes)", versionChecks)
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
	if err := argumentChanges(ctx, old, next, run); err != nil {
		return err
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

// argumentChanges checks the writes whose arguments v2 changed, in a
// cluster whose voters a1 and a2 run v1 until the end. The accounts
// versions-<run>-0 and -1 hold 15 each (versionRound).
func argumentChanges(ctx context.Context, old *v1.AccountsClient, next *v2.AccountsClient, run int64) error {
	from, to := fmt.Sprintf("versions-%d-0", run), fmt.Sprintf("versions-%d-1", run)
	// Reference: a string in v1, bytes in v2, alike on the wire.
	if _, err := old.Transfer(ctx, v1.TransferRequest{From: from, To: to, Amount: 1, Reference: "v1"}); err != nil {
		return fmt.Errorf("v1 Transfer with a reference: %w", err)
	}
	if _, err := next.Transfer(ctx, v2.TransferRequest{From: to, To: from, Amount: 1, Reference: []byte("v2")}); err != nil {
		return fmt.Errorf("v2 Transfer with a reference: %w", err)
	}
	// Memo, added in the middle by v2: a v1 voter would skip it.
	_, err := next.Transfer(ctx, v2.TransferRequest{From: from, To: to, Amount: 1, Memo: "rent"})
	if !errors.Is(err, runtime.ErrVotersCannotApply) || runtime.MaybeExecuted(err) || !strings.Contains(err.Error(), "TransferRequest") {
		return fmt.Errorf("v2 Transfer with a memo: %v (maybe executed %v); want ErrVotersCannotApply naming the field, not executed", err, runtime.MaybeExecuted(err))
	}
	// Initial, widened by v2: a value an int32 holds goes through, one it
	// does not is refused by the leader's gate (a v2 leader) or its
	// decoder (a v1 leader), not executed either way.
	wide, huge := fmt.Sprintf("versions-%d-wide", run), fmt.Sprintf("versions-%d-huge", run)
	if b, err := next.Open(ctx, v2.OpenRequest{AccountID: wide, Initial: 1 << 30}); err != nil || b.Amount != 1<<30 {
		return fmt.Errorf("v2 Open(%s) of 1<<30 = %+v, %v", wide, b, err)
	}
	_, err = next.Open(ctx, v2.OpenRequest{AccountID: huge, Initial: 5_000_000_000})
	if !(errors.Is(err, runtime.ErrVotersCannotApply) || errors.Is(err, runtime.ErrBadArguments)) || runtime.MaybeExecuted(err) {
		return fmt.Errorf("v2 Open(%s) of 5000000000: %v (maybe executed %v); want ErrVotersCannotApply or ErrBadArguments, not executed", huge, err, runtime.MaybeExecuted(err))
	}
	if ok, err := next.Exists(ctx, huge); err != nil || ok {
		return fmt.Errorf("v2 Exists(%s) after a refused Open = %v, %v; want false", huge, ok, err)
	}
	// Nothing refused ran: each account still holds 15. Balance.AccountID,
	// removed by v2, is there when a v1 node answers, empty when a v2
	// node does.
	for _, id := range []string{from, to} {
		b, err := old.Balance(ctx, id)
		if err != nil || b.Amount != 15 || (b.AccountID != id && b.AccountID != "") {
			return fmt.Errorf("v1 Balance(%s) = %+v, %v; want 15", id, b, err)
		}
	}
	return nil
}
