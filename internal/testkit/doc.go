// Package testkit is what the module's tests share: certificates made up
// for one test (cert.go), waiting for a condition nothing signals
// (wait.go), free loopback ports (port.go) and a logger that fails a test
// on an engine bug (log.go). Only test code imports it.
package testkit
