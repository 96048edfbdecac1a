package cluster

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
	"testing"
)

func TestLogWriterLevelsAndSuspicion(t *testing.T) {
	var buf bytes.Buffer
	var suspects []string
	w := &logWriter{
		log:     slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: dropTime})),
		suspect: func(name string) { suspects = append(suspects, name) },
	}
	l := log.New(w, "", 0)
	l.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	l.Printf("[ERR] memberlist: failed to receive: No installed keys could decrypt the message")
	l.Printf("[INFO] memberlist: Suspect node 7 has failed, no acks received")
	l.Printf("no level at all")
	want := `level=DEBUG msg="Stream connection from=127.0.0.1:1" component=memberlist
level=WARN msg="failed to receive: No installed keys could decrypt the message" component=memberlist
level=DEBUG msg="Suspect node 7 has failed, no acks received" component=memberlist
level=DEBUG msg="no level at all" component=memberlist
`
	if got := buf.String(); got != want {
		t.Errorf("log output:\n%s\nwant:\n%s", got, want)
	}
	if strings.Join(suspects, "|") != "node 7" {
		t.Errorf("suspects = %q", suspects)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
