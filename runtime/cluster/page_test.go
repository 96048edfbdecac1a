package cluster

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// The page's static files need no token; every route with data still does.
func TestPageWithoutTokenDataWithToken(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers(), Metrics: fakeMetrics{}, Token: "s3cret"})

	rec := get(h, "/cluster/page/", "")
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /cluster/page/: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q", got)
	}
	for path, ctype := range map[string]string{"/cluster/page/page.js": "text/javascript", "/cluster/page/page.css": "text/css"} {
		if rec := get(h, path, ""); rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), ctype) || rec.Body.Len() == 0 {
			t.Errorf("GET %s: %d %q, %d bytes", path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
		}
	}
	if rec := get(h, "/cluster/page", ""); rec.Code/100 != 3 || rec.Header().Get("Location") != "/cluster/page/" {
		t.Errorf("GET /cluster/page: %d to %q, want a redirect to /cluster/page/", rec.Code, rec.Header().Get("Location"))
	}
	// The management address itself leads to the page, with no token.
	if rec := get(h, "/", ""); rec.Code != http.StatusFound || rec.Header().Get("Location") != "cluster/page/" {
		t.Errorf("GET /: %d to %q, want a redirect to cluster/page/", rec.Code, rec.Header().Get("Location"))
	}
	if base, _ := url.Parse("http://node/"); base.ResolveReference(&url.URL{Path: get(h, "/", "").Header().Get("Location")}).Path != pagePrefix {
		t.Errorf("GET / does not lead to %s", pagePrefix)
	}
	do(t, h, call{method: "GET", path: "/cluster/page/nothing.js", status: 404, contains: "no page file"})
	do(t, h, call{method: "GET", path: "/nothing", status: 401, contains: "bearer token"})
	do(t, h, call{method: "HEAD", path: "/cluster/page/", status: 200})

	// Nothing else comes along without the token: not the data routes, not
	// a path that leaves the page's directory, not another method.
	for _, c := range []call{
		{method: "GET", path: "/cluster/members"},
		{method: "GET", path: "/cluster/page/../members"},
		{method: "GET", path: "/cluster/page/../../metrics"},
		{method: "GET", path: "/metrics"},
		{method: "GET", path: "/ops"},
		{method: "GET", path: "/health/ready"},
		{method: "POST", path: "/cluster/page/"},
	} {
		c.status, c.contains = 401, "bearer token"
		do(t, h, c)
	}
	do(t, h, call{method: "GET", path: "/cluster/members", token: "s3cret", status: 200, contains: `"name":"local"`})
}

// An application route may overlap the page's path pattern; it keeps the
// token.
func TestPageBesideExtraRoute(t *testing.T) {
	extra := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"extra":true}`)) })
	h := NewManagement(ManagementConfig{Members: testMembers(), Token: "s3cret", Routes: map[string]http.Handler{"GET /{app}/page/": extra}})
	do(t, h, call{method: "GET", path: "/app/page/", status: 401, contains: "bearer token"})
	do(t, h, call{method: "GET", path: "/app/page/", token: "s3cret", status: 200, contains: `"extra":true`})
	do(t, h, call{method: "GET", path: "/cluster/page/", status: 200, contains: "<title>ffgen cluster</title>"})
}

// The page loads only its own files, and every route it polls is one the
// management handler serves.
func TestPageAssetsAndRoutes(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers(), Metrics: fakeMetrics{}, Groups: []string{"g0"}})
	index := get(h, "/cluster/page/", "").Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(index, -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %v, want the script and the style sheet", refs)
	}
	for _, ref := range refs {
		if strings.Contains(ref[1], "//") || strings.Contains(ref[1], ":") {
			t.Errorf("index.html loads %q from elsewhere: the page must work offline", ref[1])
			continue
		}
		if rec := get(h, "/cluster/page/"+ref[1], ""); rec.Code != 200 {
			t.Errorf("index.html references %s: %d", ref[1], rec.Code)
		}
	}

	js := get(h, "/cluster/page/page.js", "").Body.String()
	routes := regexp.MustCompile(`\n\s+\w+: "(\.\./[^"]+)"`).FindAllStringSubmatch(js, -1)
	want := map[string]bool{"/cluster/members": false, "/cluster/replicas": false, "/metrics": false, "/ops": false, "/health/ready": false}
	base, _ := url.Parse("http://node/cluster/page/")
	for _, r := range routes {
		ref, err := url.Parse(r[1])
		if err != nil {
			t.Fatal(err)
		}
		path := base.ResolveReference(ref).Path
		if _, ok := want[path]; !ok {
			t.Errorf("the page polls %s (%s), not a route it is meant to read", path, r[1])
			continue
		}
		want[path] = true
		if rec := get(h, path, ""); rec.Code != 200 {
			t.Errorf("the page polls %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	for path, seen := range want {
		if !seen {
			t.Errorf("the page does not poll %s", path)
		}
	}
}

func get(h http.Handler, path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
