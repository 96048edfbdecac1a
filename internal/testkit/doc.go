// Package testkit is what the module's tests and measurement harnesses
// share: certificates made up for one test (cert.go), waiting for a
// condition nothing signals (wait.go), free loopback ports (port.go), a
// logger that fails a test on an engine bug (log.go), a process's CPU time
// (proc.go) and processes that keep the CPUs busy (burn_linux.go). Only
// test code and the harnesses (bench-compare, the bank's testbed) import
// it.
package testkit
