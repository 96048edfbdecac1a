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

// FetchReport reads the report of the node whose management endpoint is at
// addr (host:port).
func FetchReport(ctx context.Context, c *http.Client, addr, prefix string) (Report, error) {
	u := url.URL{Scheme: "http", Host: addr, Path: BalancesPath, RawQuery: url.Values{"prefix": {prefix}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Report{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Report{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Report{}, fmt.Errorf("%s: %w", u.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return Report{}, fmt.Errorf("%s: %s: %s", u.String(), resp.Status, body)
	}
	var r Report
	if err := json.Unmarshal(body, &r); err != nil {
		return Report{}, fmt.Errorf("%s: bad report: %w", u.String(), err)
	}
	return r, nil
}
