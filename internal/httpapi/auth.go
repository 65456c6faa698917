package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Who may do what, when Options.Token is set:
//   - a request with "Authorization: Bearer <token>" may do anything (scripts, Prometheus);
//   - a browser signs in once at POST /login and gets a session cookie: HttpOnly (no script can
//     read it), SameSite=Strict (no other site can make the browser send it), scoped to
//     Options.BasePath, Secure behind TLS. Its value is derived from the token, never the token;
//   - reads (the API, the pages, /metrics) need one or the other unless PublicReads (or, for
//     /metrics, PublicMetrics) says otherwise;
//   - a change through the session cookie also needs the X-Taskling-Request header, which only
//     a same-origin script can send (a cross-site form cannot set headers).
// Without a token the server is read-only and every read is public.

// MinTokenLength is the shortest API token accepted: 32 bytes, like the output of
// `openssl rand -base64 32`.
const MinTokenLength = 32

const (
	sessionCookie = "taskling_session"
	// requestHeader marks a change sent by the dashboard's own script.
	requestHeader = "X-Taskling-Request"
	sessionMaxAge = 12 * time.Hour
)

// sessionValue is what the session cookie holds: an HMAC of a fixed label under the token, so a
// leaked cookie does not reveal the API token (and dies with it when the token is rotated).
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("taskling dashboard session v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) bearerOK(r *http.Request) bool {
	v := r.Header.Get("Authorization")
	t, ok := strings.CutPrefix(v, "Bearer ")
	return ok && h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(t)), []byte(h.opts.Token)) == 1
}

func (h *Handler) sessionOK(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil || h.opts.Token == "" {
		return false
	}
	v, err := url.QueryUnescape(c.Value) // a cookie value may arrive percent-encoded
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(v), []byte(h.session)) == 1
}

// authenticated reports whether the request carries the token or a session.
func (h *Handler) authenticated(r *http.Request) bool { return h.bearerOK(r) || h.sessionOK(r) }

// readsProtected reports whether reads need authentication.
func (h *Handler) readsProtected() bool { return h.opts.Token != "" && !h.opts.PublicReads }

func (h *Handler) readAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.readsProtected() && !h.authenticated(r) {
			unauthorized(w)
			return
		}
		next(w, r)
	})
}

func (h *Handler) metricsAccess(next http.HandlerFunc) http.Handler {
	if h.opts.PublicMetrics {
		return next
	}
	return h.readAccess(next)
}

func (h *Handler) writeAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.opts.Token == "":
			writeError(w, http.StatusForbidden, "", "the server is read-only: start it with an API token (TASKLING_API_TOKEN) to allow changes")
			return
		case h.bearerOK(r):
		case h.sessionOK(r) && r.Header.Get(requestHeader) != "":
		default:
			unauthorized(w)
			return
		}
		// A change without a body (a DELETE, a cancel without a reason) has nothing to type.
		if r.Method != http.MethodDelete && r.ContentLength != 0 {
			if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
				writeError(w, http.StatusUnsupportedMediaType, "Content-Type", "Content-Type is "+quoteOr(ct, "missing")+"; want application/json")
				return
			}
		}
		next(w, r)
	})
}

// pageAccess guards the dashboard's pages: without authentication, a protected page is the
// sign-in form.
func (h *Handler) pageAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.readsProtected() && !h.authenticated(r) {
			h.renderLogin(w, r, http.StatusUnauthorized, "")
			return
		}
		next(w, r)
	})
}

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	p := h.basePage(r, "Sign in")
	next := strings.TrimPrefix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost:
		next = r.PostFormValue("next")
	case next == "login":
		next = r.URL.Query().Get("next")
	}
	next = safeNext(next)
	p.Data = loginData{Next: next, Problem: problem}
	h.render(w, r, status, "login", p)
}

type loginData struct {
	Next    string // where to go after signing in, relative to the handler's root
	Problem string
}

// login checks the token posted by the sign-in form and sets the session cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		writeError(w, http.StatusNotFound, "", "this server has no API token: there is nothing to sign in to")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	given := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(given), []byte(h.opts.Token)) != 1 {
		h.renderLogin(w, r, http.StatusUnauthorized, "That is not this server's API token.")
		return
	}
	http.SetCookie(w, h.cookie(r, h.session, int(sessionMaxAge.Seconds())))
	http.Redirect(w, r, h.opts.BasePath+safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the browser's session.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, h.cookie(r, "", -1))
	http.Redirect(w, r, h.opts.BasePath, http.StatusSeeOther)
}

func (h *Handler) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: sessionCookie, Value: value, Path: h.opts.BasePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	}
}

// safeNext keeps a post-login destination inside the handler: a path relative to its root. It
// is parsed as a URL, as the browser will: no scheme, no host, no user, no leading "/", no
// backslash (browsers read it as "/"), no control, space or format character (browsers drop tabs
// and newlines, so "\t//evil" would become "//evil"), not even percent-encoded, no ".." segment.
// Anything else is "".
func safeNext(next string) string {
	odd := func(r rune) bool {
		return r == '\\' || unicode.IsControl(r) || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
	}
	if next == "" || strings.ContainsFunc(next, odd) {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || strings.ContainsFunc(u.Path, odd) ||
		strings.HasPrefix(u.Path, "/") || slices.Contains(strings.Split(u.Path, "/"), "..") {
		return ""
	}
	return next
}

func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

func quoteOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return `"` + s + `"`
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="taskling"`)
	writeError(w, http.StatusUnauthorized, "Authorization", "missing or wrong bearer token (Authorization: Bearer $TASKLING_API_TOKEN)")
}
