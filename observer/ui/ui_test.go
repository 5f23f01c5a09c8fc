package ui_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dtq/dtq/observer/ui"
)

func serveUI(u *ui.UI, method, path string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	if path == "/" {
		u.Index(rec, req)
	} else {
		u.Asset(rec, req)
	}
	return rec
}

func wantSecurityHeaders(t *testing.T, path string, h http.Header) {
	t.Helper()
	if h.Get("Content-Security-Policy") != ui.CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("%s: security headers missing: %v", path, h)
	}
}

func TestIndexPointsAtVersionedAssets(t *testing.T) {
	u := ui.New()
	rec := serveUI(u, http.MethodGet, "/")
	wantSecurityHeaders(t, "/", rec.Header())
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("index: %d %v", rec.Code, rec.Header())
	}
	for _, want := range []string{`/ui/` + u.Version() + `/app.js`, `/ui/` + u.Version() + `/app.css`, `name="viewport"`} {
		if !strings.Contains(body, want) {
			t.Errorf("index lacks %q", want)
		}
	}
	if strings.Contains(body, "{{V}}") || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("index: %q, Cache-Control %q", body, rec.Header().Get("Cache-Control"))
	}
}

func TestAssetCaching(t *testing.T) {
	u := ui.New()
	v := serveUI(u, http.MethodGet, "/ui/"+u.Version()+"/app.js")
	if v.Code != http.StatusOK || v.Header().Get("Cache-Control") != "public, max-age=31536000, immutable" ||
		v.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Fatalf("versioned: %d %v", v.Code, v.Header())
	}
	wantSecurityHeaders(t, "versioned", v.Header())
	for _, path := range []string{"/ui/app.js", "/ui/0123456789ab/app.js"} { // plain, or of another version
		r := serveUI(u, http.MethodGet, path)
		if r.Code != http.StatusOK || r.Header().Get("Cache-Control") != "no-cache" || r.Body.String() != v.Body.String() {
			t.Fatalf("%s: %d %v", path, r.Code, r.Header())
		}
		etag := r.Header().Get("ETag")
		if nm := serveUI(u, http.MethodGet, path, "If-None-Match", etag); etag == "" || nm.Code != http.StatusNotModified || nm.Body.Len() != 0 {
			t.Fatalf("%s revalidated with %q: %d", path, etag, nm.Code)
		}
		if nm := serveUI(u, http.MethodGet, path, "If-None-Match", `"other"`); nm.Code != http.StatusOK {
			t.Fatalf("%s with a stale ETag: %d", path, nm.Code)
		}
	}
	css := serveUI(u, http.MethodGet, "/ui/app.css")
	if !strings.HasPrefix(css.Header().Get("Content-Type"), "text/css") {
		t.Fatalf("css: %v", css.Header())
	}
}

func TestAssetGzipped(t *testing.T) {
	u := ui.New()
	plain := serveUI(u, http.MethodGet, "/ui/views.js")
	gz := serveUI(u, http.MethodGet, "/ui/views.js", "Accept-Encoding", "br, gzip")
	if gz.Header().Get("Content-Encoding") != "gzip" || gz.Header().Get("Vary") != "Accept-Encoding" || gz.Body.Len() >= plain.Body.Len() {
		t.Fatalf("gzip: %v, %d bytes vs %d", gz.Header(), gz.Body.Len(), plain.Body.Len())
	}
	zr, err := gzip.NewReader(gz.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(b, plain.Body.Bytes()) {
		t.Fatalf("gunzipped: %v, equal %v", err, bytes.Equal(b, plain.Body.Bytes()))
	}
	if gz.Header().Get("ETag") == plain.Header().Get("ETag") {
		t.Fatal("the gzipped and plain answers share an ETag")
	}
	if r := serveUI(u, http.MethodGet, "/ui/views.js", "Accept-Encoding", "gzip;q=0"); r.Header().Get("Content-Encoding") != "" {
		t.Fatal("gzip sent to a client refusing it")
	}
}

func TestUnknownAssetIs404(t *testing.T) {
	u := ui.New()
	for _, path := range []string{"/ui/nothing.js", "/ui/index.html", "/ui/" + u.Version() + "/a/app.js", "/ui/../ui.go"} {
		r := serveUI(u, http.MethodGet, path)
		if r.Code != http.StatusNotFound {
			t.Errorf("%s: %d", path, r.Code)
		}
		wantSecurityHeaders(t, path, r.Header())
	}
}

// The sources hold no construct that would parse data as markup or code, and the page
// needs nothing CSP forbids (inline scripts, style attributes, handlers in markup).
func TestSourcesAvoidMarkupFromData(t *testing.T) {
	dir := "static"
	files, err := fs.Glob(os.DirFS(dir), "*")
	if err != nil || len(files) < 3 {
		t.Fatalf("static files: %v %v", files, err)
	}
	banned := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setTimeout\(['"]|javascript:|https?://`)
	inline := regexp.MustCompile(`(?i)<script>|<script [^>]*>[^<]|\sstyle=|\son[a-z]+=`)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		src := strings.ReplaceAll(string(b), "'http://www.w3.org/2000/svg'", "") // a namespace, not a request
		if strings.HasSuffix(f, ".js") {
			if m := banned.FindString(src); m != "" {
				t.Errorf("%s uses %q", f, m)
			}
		}
		if strings.HasSuffix(f, ".html") {
			if m := inline.FindString(src); m != "" {
				t.Errorf("%s has %q, which the CSP refuses", f, m)
			}
		}
	}
}
