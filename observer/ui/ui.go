// Package ui is the observer's dashboard: static HTML, one stylesheet and a few ES
// modules, embedded in the binary (no build step, nothing fetched from elsewhere). It
// reads and acts only through the observer's JSON API, from the browser.
package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed static
var files embed.FS

// CSP is the Content-Security-Policy of every dashboard answer: scripts, styles and
// requests from the observer itself only, no inline script or style, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is the path the assets are served under.
const Prefix = "/ui/"

// UI serves the dashboard.
type UI struct {
	assets  map[string][]byte // by file name
	gz      map[string][]byte // the same, gzipped ("" for the index)
	version string            // hash of every asset: assets are served under Prefix+version+"/"
	index   []byte            // index.html pointing at the versioned assets
	etags   map[string]string
}

// New reads the embedded files.
func New() *UI {
	u := &UI{assets: map[string][]byte{}, gz: map[string][]byte{}, etags: map[string]string{}}
	all := sha256.New()
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	for _, e := range entries {
		b, err := fs.ReadFile(files, "static/"+e.Name())
		if err != nil {
			panic(err)
		}
		u.assets[e.Name()] = b
		h := sha256.Sum256(b)
		u.etags[e.Name()] = `"` + hex.EncodeToString(h[:8]) + `"`
		all.Write([]byte(e.Name()))
		all.Write(h[:])
	}
	u.version = hex.EncodeToString(all.Sum(nil)[:6])
	u.index = bytes.ReplaceAll(u.assets["index.html"], []byte("{{V}}"), []byte(u.version))
	for name, b := range u.assets {
		u.gz[name] = gzipped(b)
	}
	u.gz[""] = gzipped(u.index)
	return u
}

// Version is the content hash in the assets' paths.
func (u *UI) Version() string { return u.version }

// SecurityHeaders sets the headers every dashboard answer carries.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// Index serves index.html (revalidated on every load, so a new version is picked up).
func (u *UI) Index(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-cache")
	serve(w, r, "text/html; charset=utf-8", `"`+u.version+`"`, u.index, u.gz[""])
}

// Asset serves Prefix+"<version>/<name>" (cached for a year: the version changes with
// the content) or Prefix+"<name>" (revalidated by ETag).
func (u *UI) Asset(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	rest := strings.TrimPrefix(r.URL.Path, Prefix)
	name, immutable := rest, false
	if v, n, ok := strings.Cut(rest, "/"); ok {
		name, immutable = n, v == u.version
	}
	b, ok := u.assets[name]
	if !ok || name == "index.html" || strings.Contains(name, "/") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("404 not found\n"))
		return
	}
	if immutable {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if strings.HasSuffix(name, ".js") {
		ct = "text/javascript; charset=utf-8"
	}
	serve(w, r, ct, u.etags[name], b, u.gz[name])
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// serve answers b, or gz (b gzipped) to a client that takes it.
func serve(w http.ResponseWriter, r *http.Request, ct, etag string, b, gz []byte) {
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		b, etag = gz, strings.TrimSuffix(etag, `"`)+`-gz"`
	}
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	_, _ = w.Write(b)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			return strings.TrimSpace(strings.ReplaceAll(q, " ", "")) != "q=0"
		}
	}
	return false
}
