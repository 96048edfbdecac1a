package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestManagementClientSendsToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"error":"missing or wrong bearer token"}`, http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(Report{Node: "n1"})
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	r, err := FetchReport(context.Background(), ManagementClient(time.Second, "s3cret"), addr, "p")
	if err != nil || r.Node != "n1" {
		t.Fatalf("with token: %+v, %v", r, err)
	}
	_, err = FetchReport(context.Background(), ManagementClient(time.Second, ""), addr, "p")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without token: %v, want a 401 error", err)
	}
}
