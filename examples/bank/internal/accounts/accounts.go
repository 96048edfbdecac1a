// Package accounts is the version of the bank's Accounts service that
// bankload calls: the first (package bank), or with -tags bankv2 the next
// (internal/v2), so that one load program is an old or a new client in the
// mixed-version test. It re-exports what bankload uses under one set of
// names.
package accounts
