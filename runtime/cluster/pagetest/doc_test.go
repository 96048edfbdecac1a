// Package pagetest drives the cluster page of runtime/cluster in a real
// browser: headless Chromium over the DevTools protocol (chromedp) against
// a cluster of node processes on loopback.
//
// It is a module of its own so that the library's module does not depend
// on chromedp. Run it with `make browsertest` (or `go test` here); without
// a Chromium it skips, saying so, unless FFGEN_REQUIRE_BROWSER is set.
package pagetest
