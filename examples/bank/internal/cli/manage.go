package cli

import (
	"net/http"
	"time"
)

// ManageTokenEnv names the bearer token of the nodes' management endpoints;
// banknode requires it on every request when set, bankload and the demo
// send it.
const ManageTokenEnv = "FFGEN_MANAGE_TOKEN"

// ManagementClient returns an HTTP client for the management endpoints that
// sends token as a bearer token, if not empty.
func ManagementClient(timeout time.Duration, token string) *http.Client {
	c := &http.Client{Timeout: timeout}
	if token != "" {
		c.Transport = bearer{token: token, next: http.DefaultTransport}
	}
	return c
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not modify the request
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
