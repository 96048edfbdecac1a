package bank_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// bankCluster is two groups of two nodes, each with its own ledger.
type bankCluster struct {
	*fftest.Cluster
	ledgers map[string]*bank.Ledger
	client  *runtime.Client
	accts   *bank.AccountsClient
}

func newBankCluster(t *testing.T) *bankCluster {
	c := &bankCluster{
		Cluster: fftest.New(t, fftest.Config{PerGroup: 2}),
		ledgers: map[string]*bank.Ledger{},
	}
	c.Serve(t, bank.AccountsDesc, func(n *fftest.Node) any {
		l := bank.NewLedger(0)
		c.ledgers[n.Name] = l
		return l
	})
	c.client = c.Client(t)
	c.accts = bank.NewAccountsClient(c.client)
	return c
}

// owner returns the node that serves id's reads first.
func (c *bankCluster) owner(id string) string {
	return c.Owners(bank.AccountsDesc.Name, id)[0]
}

// accountOwnedBy returns an account ID whose reads go first to node.
func (c *bankCluster) accountOwnedBy(t *testing.T, node string) string {
	for i := range 1000 {
		if id := fmt.Sprintf("acct-%d", i); c.owner(id) == node {
			return id
		}
	}
	t.Fatalf("no account owned by %s", node)
	return ""
}

// wantReplicasEqual checks that the named nodes hold the same balances.
func (c *bankCluster) wantReplicasEqual(t *testing.T, nodes ...string) map[string]int64 {
	t.Helper()
	first := c.ledgers[nodes[0]].Snapshot("").Balances
	for _, n := range nodes[1:] {
		if got := c.ledgers[n].Snapshot("").Balances; !maps.Equal(got, first) {
			t.Fatalf("replicas differ: %s has %v, %s has %v", nodes[0], first, n, got)
		}
	}
	return first
}

func TestScatteredWritesReachEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		for _, id := range []string{"x", "y"} {
			if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: id, Initial: 100}); err != nil {
				t.Fatalf("Open(%s): %v", id, err)
			}
		}
		if b, err := c.accts.Transfer(ctx, bank.TransferRequest{From: "x", To: "y", Amount: 60}); err != nil || b.Amount != 40 {
			t.Fatalf("Transfer = %+v, %v; want x at 40", b, err)
		}
		_, err := c.accts.Withdraw(ctx, bank.WithdrawRequest{AccountID: "x", Amount: 41})
		if !errors.Is(err, bank.ErrInsufficientFunds) {
			t.Fatalf("Withdraw = %v, want ErrInsufficientFunds across the wire", err)
		}
		if _, err := c.accts.Deposit(ctx, bank.DepositRequest{AccountID: "nope", Amount: 1}); !errors.Is(err, bank.ErrUnknownAccount) {
			t.Fatalf("Deposit to unknown = %v, want ErrUnknownAccount", err)
		}
		synctest.Wait() // the losing replicas finish their copies
		got := c.wantReplicasEqual(t, "a1", "a2", "b1", "b2")
		if want := map[string]int64{"x": 40, "y": 160}; !maps.Equal(got, want) {
			t.Fatalf("balances = %v, want %v", got, want)
		}
	})
}

// A frozen node delays writes by at most one heartbeat timeout (when it is
// the raft leader, the first write fails over and the node it reaches is
// elected;
// later writes skip it), reads fail over within the heartbeat timeout, and
// once it thaws the node catches up, so every replica is equal again.
func TestFrozenNodeCatchesUpAndReadsFailOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		id := c.accountOwnedBy(t, "a1")
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: id, Initial: 10}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every copy of the Open is applied, a1's too, before it freezes
		c.Net.Pause("a1")
		start := time.Now()
		for range 5 {
			if _, err := c.accts.Deposit(ctx, bank.DepositRequest{AccountID: id, Amount: 1}); err != nil {
				t.Fatalf("Deposit with a1 frozen: %v", err)
			}
		}
		if d := time.Since(start); d > c.Settings.HeartbeatTimeout+c.Settings.HeartbeatInterval {
			t.Errorf("writes with a1 frozen took %v; want at most one heartbeat timeout (%v)", d, c.Settings.HeartbeatTimeout)
		}
		// The followers run a write a network delay after its writer
		// was answered; the read goes to one of them.
		c.WaitConverged(t, "a2", "b1", "b2")
		start = time.Now()
		b, err := c.accts.Balance(ctx, id)
		if err != nil || b.Amount != 15 {
			t.Fatalf("Balance with owner frozen = %+v, %v; want 15 from another group", b, err)
		}
		// At most one heartbeat timeout; none if the writes already made
		// the client suspect a1.
		if d := time.Since(start); d > c.Settings.HeartbeatTimeout+c.Settings.HeartbeatInterval {
			t.Errorf("Balance took %v; want at most one heartbeat timeout (%v)", d, c.Settings.HeartbeatTimeout)
		}
		if got := c.ledgers["a1"].Snapshot("").Balances[id]; got != 10 {
			t.Fatalf("frozen a1 applied writes: balance %d, want 10", got)
		}
		c.Net.Resume("a1")
		synctest.Wait()
		got := c.wantReplicasEqual(t, "a1", "a2", "b1", "b2")
		if got[id] != 15 {
			t.Fatalf("balance after thaw = %d, want 15", got[id])
		}
		for name, l := range c.ledgers {
			if s := l.Snapshot(""); s.Applied != 6 {
				t.Errorf("%s applied %d writes, want 6 (each once)", name, s.Applied)
			}
		}
	})
}

// A crashed node misses writes; the survivors stay equal and serve reads.
func TestCrashedNodeLeavesSurvivorsEqual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		id := c.accountOwnedBy(t, "b2")
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: id}); err != nil {
			t.Fatal(err)
		}
		c.Crash("b2")
		for range 3 {
			if _, err := c.accts.Deposit(ctx, bank.DepositRequest{AccountID: id, Amount: 7}); err != nil {
				t.Fatalf("Deposit after crash: %v", err)
			}
		}
		c.WaitConverged(t, "a1", "a2", "b1")
		if b, err := c.accts.Balance(ctx, id); err != nil || b.Amount != 21 {
			t.Fatalf("Balance = %+v, %v; want 21", b, err)
		}
		synctest.Wait()
		if got := c.wantReplicasEqual(t, "a1", "a2", "b1"); got[id] != 21 {
			t.Fatalf("balance = %d, want 21", got[id])
		}
		// Restarted empty, it copies the others before it answers.
		c.Restart(t, "b2")
		c.WaitConverged(t)
		synctest.Wait()
		if got := c.wantReplicasEqual(t, "a1", "a2", "b1", "b2"); got[id] != 21 {
			t.Fatalf("balance after b2's restart = %d, want 21", got[id])
		}
	})
}

// Close waits for the account to be idle and is refused while money is in it.
func TestCloseThroughTheCluster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: "z", Initial: 5}); err != nil {
			t.Fatal(err)
		}
		// The Open is acknowledged once a quorum holds it; the node Close
		// runs on may be the one that holds it a network delay later
		// (there is no read-your-writes across nodes).
		c.WaitConverged(t)
		if err := c.accts.Close(ctx, "z"); !errors.Is(err, bank.ErrBalanceNotZero) {
			t.Fatalf("Close non-empty = %v, want ErrBalanceNotZero", err)
		}
		if _, err := c.accts.Withdraw(ctx, bank.WithdrawRequest{AccountID: "z", Amount: 5}); err != nil {
			t.Fatal(err)
		}
		// Close runs on one node, which sees the Withdraw once it has run
		// there: an acknowledged write reaches the followers a network
		// delay later.
		c.WaitConverged(t)
		if err := c.accts.Close(ctx, "z"); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := c.accts.Close(ctx, "z"); !errors.Is(err, bank.ErrAccountClosed) {
			t.Fatalf("second Close = %v, want ErrAccountClosed", err)
		}
	})
}

// A busy node answers ErrLedgerBusy, which fails reads over to the next group.
func TestBusyNodeFailsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		id := c.accountOwnedBy(t, "a2")
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: id, Initial: 3}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		c.ledgers["a2"].SetBusy(true)
		if b, err := c.accts.Balance(ctx, id); err != nil || b.Amount != 3 {
			t.Fatalf("Balance with owner busy = %+v, %v; want 3 from the next group", b, err)
		}
	})
}

// A write sent under a caller-chosen operation ID is journaled under that
// ID on every replica, once, even when the caller sends it again.
func TestCallerChosenOperationIDReachesEveryJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newBankCluster(t)
		ctx := context.Background()
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: "x", Initial: 10}); err != nil {
			t.Fatal(err)
		}
		id := [16]byte{0xca, 0xfe, 15: 1}
		octx := runtime.WithOperationID(ctx, id)
		for range 2 {
			if b, err := c.accts.Deposit(octx, bank.DepositRequest{AccountID: "x", Amount: 5}); err != nil || b.Amount != 15 {
				t.Fatalf("Deposit = %+v, %v; want 15 (the repeat answered from memory)", b, err)
			}
		}
		synctest.Wait()
		want := bank.JournalEntry{ID: hex.EncodeToString(id[:]), Runs: 1, Amount: 15}
		for name, l := range c.ledgers {
			i := slices.IndexFunc(l.Journal().Entries, func(e bank.JournalEntry) bool { return e.ID == want.ID })
			if i < 0 || l.Journal().Entries[i] != want {
				t.Errorf("%s journal %+v; want %+v", name, l.Journal().Entries, want)
			}
		}
		if got := c.wantReplicasEqual(t, "a1", "a2", "b1", "b2"); got["x"] != 15 {
			t.Fatalf("balance = %d, want 15", got["x"])
		}
	})
}
