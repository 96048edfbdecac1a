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
// replicated by the runtime: the service's sequencer orders every client's
// writes and every node runs them in that order, so all replicas hold the
// same balances whichever and however many clients write. Balance is read
// from one node and fails over to the next group in a fraction of a second
// when that node stops answering.
//
// Each write is idempotent by its operation ID (runtime.AttemptFrom): a
// node executes an operation at most once and answers a repeat from memory.
// The ledger also journals every write it executes, by operation ID
// (Ledger.Journal), so that an audit can find each acknowledged write on
// every node.
//
// A node that is behind (restarted empty, paused, cut off) answers nothing
// until it has caught up; Ledger implements runtime.StateTransfer so that it
// can copy a peer's accounts, remembered outcomes and journal. Close runs on
// one node only; see Accounts.Close.
//
// cmd/banknode runs one node; cmd/bankload drives a cluster with load and
// audits every node's balances and journal afterwards; demo runs the whole
// scenario with a crash and a freeze (make demo); faults runs the fault
// suite (make faults).
package bank
