// Package bank is the example service of ffgen: a ledger of bank accounts
// replicated on every node of a cluster with two or more failure groups.
//
// The annotated interface Accounts is the whole contract. ffgen (run by go
// generate) writes accounts_ff.go beside it: AccountsClient, a typed client
// that implements Accounts over a runtime.Client, and
// RegisterAccountsServer, which serves an Accounts implementation on a
// runtime.Server. Ledger is the in-memory implementation every node runs.
//
// Writes (Open, Deposit, Withdraw, Transfer) are scattered, that is
// replicated by the runtime: the nodes form one raft group for the
// service, its leader orders every client's writes, a write is
// acknowledged once a majority of the voters hold it, and every node runs
// the writes in log order, so all replicas hold the same balances
// whichever and however many clients write. Balance is linearizable: the
// node that answers first makes sure, with the leader, that it has applied
// every write acknowledged before the call; it fails over to the next
// group in a fraction of a second when that node stops answering.
//
// Each write is idempotent by its operation ID (runtime.AttemptFrom): the
// runtime records every write's result by operation ID as replicated
// state, so a retry is answered from the record instead of running again,
// and the ledger also remembers the outcomes of recent operations. The
// ledger journals every write it executes, by operation ID
// (Ledger.Journal), so that an audit can find each acknowledged write on
// every node.
//
// A node that does not serve the service (joining, a learner getting the
// log or a snapshot, far behind, without a leader) refuses its calls until
// it does; Ledger implements runtime.StateTransfer, so the nodes snapshot
// it (accounts, remembered outcomes and journal) and a node that joins or
// falls far behind installs a snapshot instead of replaying every write.
// Close runs on one node only; see Accounts.Close.
//
// cmd/banknode runs one node; cmd/bankload drives a cluster with load and
// audits every node's balances and journal afterwards; demo runs the whole
// scenario with a crash and a freeze (make demo); faults runs the fault
// suite (make faults).
package bank
