// Package bank is the example service of ffgen: a ledger of bank accounts
// replicated on every node of a cluster with two or more failure groups.
//
// The annotated interface Accounts is the whole contract. ffgen (run by go
// generate) writes accounts_ff.go beside it: AccountsClient, a typed client
// that implements Accounts over a runtime.Client, and
// RegisterAccountsServer, which serves an Accounts implementation on a
// runtime.Server. Ledger is the in-memory implementation every node runs.
//
// Writes (Open, Deposit, Withdraw, Transfer) are scattered: every live node
// receives them, the first answer wins, and the other nodes still apply
// them, so all replicas hold the same balances. They stay equal because each
// node runs one operation per account at a time, in arrival order, and one
// client sends its scattered writes to every node in the same order.
// Several clients writing to the same accounts can reach two nodes in
// different orders; a withdrawal could then succeed on one and fail on the
// other. Balance is read from one node and fails over to the next group in
// a fraction of a second when that node stops answering.
//
// Each write is idempotent by its operation ID (runtime.AttemptFrom): a
// node executes an operation at most once and answers a repeat from memory.
// The ledger also journals every write it executes, by operation ID
// (Ledger.Journal), so that an audit can find each acknowledged write on
// every node.
//
// Known limits of the example: a node that was declared dead, restarted or
// answered ErrLedgerBusy missed writes and holds stale balances; nothing
// brings it up to date, so restart the whole cluster (or keep the node
// busy) instead. Close runs on one node only; see Accounts.Close.
//
// cmd/banknode runs one node; cmd/bankload drives a cluster with load and
// audits every node's balances and journal afterwards; demo runs the whole
// scenario with a crash and a freeze (make demo); faults runs the fault
// suite (make faults).
package bank
