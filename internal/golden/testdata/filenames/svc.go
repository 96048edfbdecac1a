// Package filenames names its services with initialisms: the files are
// named as a Go user reads the names.
package filenames

import "context"

// HTTPAPIv2Service generates http_api_v2_service_ff.go.
//
//ff:service
type HTTPAPIv2Service interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}
