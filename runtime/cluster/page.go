package cluster

import (
	"embed"
	"mime"
	"net/http"
	"path"
	"strings"
)

// The cluster page is static: the browser fetches its data from the other
// management routes, so the page itself reads no counter and adds no work
// to the engine.
//
//go:embed static
var pageFiles embed.FS

// pagePrefix is where the page lives. It sits under /cluster, a segment the
// built-in routes already reserve, so no application route can be taken by it.
const pagePrefix = "/cluster/page/"

// pagePattern is the route that serves the page's files.
const pagePattern = "GET " + pagePrefix

// pageCSP lets the page load only its own files and talk only to its own
// origin: a member name or an operation ID is text, never markup or code.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// rootPattern is the management address itself: an operator who opens it
// in a browser is sent to the page.
const rootPattern = "GET /{$}"

// root redirects to the page. The location is relative, so that it also
// leads there when the management handler is mounted under a prefix.
func (m *management) root(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", strings.TrimPrefix(pagePrefix, "/"))
	w.WriteHeader(http.StatusFound)
}

// page serves the embedded files. A browser cannot put a bearer token on a
// navigation, so these files are served without one (see isPage); they hold
// no data, and the page sends the token on each of its requests.
func (m *management) page(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, pagePrefix)
	if name == "" {
		name = "index.html"
	}
	b, err := pageFiles.ReadFile("static/" + name)
	if err != nil {
		writeError(w, http.StatusNotFound, "no page file "+name)
		return
	}
	h := w.Header()
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		h.Set("Content-Type", ct)
	}
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// isPage reports whether mux would serve r with the page's files (or
// redirect it there): exactly the requests that need no token.
func isPage(mux *http.ServeMux, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	return pattern == pagePattern || pattern == rootPattern
}
