//go:build unix && !linux

package main

const canBindCPU = false

func bindCPU(int) {}
