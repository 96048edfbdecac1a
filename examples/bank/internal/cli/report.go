package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/ffgen/ffgen/examples/bank"
)

// BalancesPath is banknode's read-only audit endpoint on its management
// address: GET BalancesPath?prefix=P returns a Report of the accounts whose
// ID starts with P.
const BalancesPath = "/bank/balances"

// Report is one node's view of its ledger.
type Report struct {
	Node     string `json:"node"`
	Group    string `json:"group"`
	InFlight int    `json:"in_flight"` // operations queued or running on the node
	bank.Snapshot
}

// JournalPath is banknode's read-only journal endpoint: GET JournalPath
// returns a JournalReport, every write the node's ledger executed by
// operation ID (bank.Ledger.Journal).
const JournalPath = "/bank/journal"

// JournalReport is one node's journal.
type JournalReport struct {
	Node  string `json:"node"`
	Group string `json:"group"`
	bank.Journal
}

// FetchReport reads the report of the node whose management endpoint is at
// addr (host:port).
func FetchReport(ctx context.Context, c *http.Client, addr, prefix string) (Report, error) {
	var r Report
	err := fetch(ctx, c, url.URL{Scheme: "http", Host: addr, Path: BalancesPath, RawQuery: url.Values{"prefix": {prefix}}.Encode()}, &r)
	return r, err
}

// FetchJournal reads the journal of the node whose management endpoint is
// at addr (host:port).
func FetchJournal(ctx context.Context, c *http.Client, addr string) (JournalReport, error) {
	var r JournalReport
	err := fetch(ctx, c, url.URL{Scheme: "http", Host: addr, Path: JournalPath}, &r)
	return r, err
}

// fetch decodes the JSON at u into v; a full journal is some 12 MiB of it.
func fetch(ctx context.Context, c *http.Client, u url.URL, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", u.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", u.String(), resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: bad report: %w", u.String(), err)
	}
	return nil
}
