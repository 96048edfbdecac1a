package metadata_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/runtime/metadata"
)

func TestConstructorsLowercaseKeys(t *testing.T) {
	md := metadata.Pairs("X-Request-ID", "1", "x-request-id", "2")
	if diff := cmp.Diff(metadata.MD{"x-request-id": {"1", "2"}}, md); diff != "" {
		t.Errorf("Pairs (-want +got):\n%s", diff)
	}
	if got := metadata.New(map[string]string{"Tenant": "blue"}).Get("TENANT"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("New/Get = %q", got)
	}
}

func TestOutgoingContextIsNotShared(t *testing.T) {
	base := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("a", "1"))
	child := metadata.AppendToOutgoingContext(base, "a", "2", "b", "3")
	parent, _ := metadata.FromOutgoingContext(base)
	got, _ := metadata.FromOutgoingContext(child)
	if diff := cmp.Diff(metadata.MD{"a": {"1"}}, parent); diff != "" {
		t.Errorf("appending changed the parent's metadata:\n%s", diff)
	}
	if diff := cmp.Diff(metadata.MD{"a": {"1", "2"}, "b": {"3"}}, got); diff != "" {
		t.Errorf("child (-want +got):\n%s", diff)
	}
	got["a"][0] = "changed"
	again, _ := metadata.FromOutgoingContext(child)
	if again["a"][0] != "1" {
		t.Error("FromOutgoingContext returned the context's own map")
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		md   metadata.MD
		want error
	}{
		{metadata.MD{"traceparent": {"00-abc"}, "x_y.z-1": {""}}, nil},
		{metadata.MD{"": {"v"}}, metadata.ErrInvalid},
		{metadata.MD{"Upper": {"v"}}, metadata.ErrInvalid},
		{metadata.MD{"a b": {"v"}}, metadata.ErrInvalid},
		{metadata.MD{"é": {"v"}}, metadata.ErrInvalid},
		{metadata.MD{"k": {strings.Repeat("v", metadata.MaxSize-33)}}, nil},
		{metadata.MD{"k": {strings.Repeat("v", metadata.MaxSize-32)}}, metadata.ErrTooLarge},
		{metadata.MD{"k": make([]string, metadata.MaxSize/32)}, metadata.ErrTooLarge},
	} {
		if err := metadata.Validate(tt.md); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("Validate(%.40v) = %v, want %v", tt.md, err, tt.want)
		}
	}
}

func TestIncomingContext(t *testing.T) {
	if _, ok := metadata.FromIncomingContext(context.Background()); ok {
		t.Error("metadata in an empty context")
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("k", "v"))
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || md.Get("k")[0] != "v" {
		t.Errorf("FromIncomingContext = %v, %v", md, ok)
	}
	if v := metadata.ValueFromIncomingContext(ctx, "K"); len(v) != 1 || v[0] != "v" {
		t.Errorf("ValueFromIncomingContext = %q", v)
	}
}
