package runtime

import (
	"context"
	"fmt"
	"slices"

	"github.com/ffgen/ffgen/runtime/internal/mdctx"
	"github.com/ffgen/ffgen/runtime/metadata"
)

// outgoingPairs returns the metadata calls under ctx send, validated, as the
// Attempt frame carries it: alternating keys and values, keys sorted, so the
// same metadata is always the same bytes. No metadata costs no allocation.
// Replicated writes keep it the same way in their log entries.
func outgoingPairs(ctx context.Context) ([]string, error) {
	md, _ := ctx.Value(mdctx.OutgoingKey{}).(metadata.MD)
	if len(md) == 0 {
		return nil, nil
	}
	if err := metadata.Validate(md); err != nil {
		return nil, fmt.Errorf("ffgen: call metadata: %w", err)
	}
	return pairsOf(md), nil
}

// pairsOf flattens md, keys sorted; nil for none.
func pairsOf(md metadata.MD) []string {
	if len(md) == 0 {
		return nil
	}
	keys := make([]string, 0, len(md))
	n := 0
	for k, vs := range md {
		keys = append(keys, k)
		n += 2 * len(vs)
	}
	slices.Sort(keys)
	out := make([]string, 0, n)
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, k, v)
		}
	}
	return out
}

// incomingMD rebuilds the metadata an Attempt carried, validated as the
// client validates it: a peer is not trusted to have done so.
func incomingMD(pairs []string) (metadata.MD, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	md := make(metadata.MD, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		md[pairs[i]] = append(md[pairs[i]], pairs[i+1])
	}
	if err := metadata.Validate(md); err != nil {
		return nil, err
	}
	return md, nil
}
