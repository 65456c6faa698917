package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/taskling"
)

// Who may do what, when the handler has principals (Options.Token, Options.PrincipalsFile):
//   - a request with "Authorization: Bearer <token>" acts as the principal whose token it is
//     (scripts, Prometheus); TASKLING_API_TOKEN is the principal "token", an operator;
//   - a browser signs in once at POST /login with a token and gets a session cookie: a random id
//     whose SHA-256 names a row of taskling.api_session (so every replica knows it, and a
//     sign-out ends it everywhere). The cookie is HttpOnly (no script can read it),
//     SameSite=Strict (no other site can make the browser send it), scoped to Options.BasePath,
//     Secure behind TLS;
//   - reads (the API, the pages, /metrics) need one or the other unless PublicReads (or, for
//     /metrics, PublicMetrics) says otherwise; changes need a principal of the operate role
//     (a read principal gets 403);
//   - a change through the session cookie also needs the X-Taskling-Request header, which only
//     a same-origin script can send (a cross-site form cannot set headers), and, like POST
//     /login and /logout, must not come from a page of another site (hosts.go: foreign);
//   - a wrong token is counted against its client's address and the server (failures.go); a
//     right one always passes;
//   - a principal keeps at most taskling.MaxAPISessionsPerPrincipal sessions.
// Without principals the server is read-only and every read is public.

// MinTokenLength is the shortest API token accepted: 32 bytes, like the output of
// `openssl rand -base64 32`.
const MinTokenLength = 32

const (
	sessionCookie = "taskling_session"
	// requestHeader marks a change sent by the dashboard's own script.
	requestHeader = "X-Taskling-Request"
	sessionMaxAge = 12 * time.Hour
)

// identity is who a request is: a principal, by a bearer token or a session, or nobody.
type identity struct {
	principal principals.Principal
	session   string // the session id, when by a session
	ok        bool
}

// errLocked: a wrong bearer token while its address is locked out, or while the server's budget
// of refused credentials is spent.
var errLocked = errors.New("too many failed sign-ins lately")

// errBadToken: the request's bearer token is no principal's.
var errBadToken = errors.New("wrong bearer token")

// whoKey holds the request's *who in its context: identify runs once per request.
type whoKey struct{}

type who struct {
	done bool
	id   identity
	err  error
}

// identify says who the request is: errLocked or errBadToken for a refused bearer token, or the
// error of reading its session.
func (h *Handler) identify(r *http.Request) (identity, error) {
	memo, _ := r.Context().Value(whoKey{}).(*who)
	if memo == nil {
		memo = &who{}
	}
	if !memo.done {
		memo.id, memo.err = h.identifyOnce(r)
		memo.done = true
	}
	return memo.id, memo.err
}

func (h *Handler) identifyOnce(r *http.Request) (identity, error) {
	if h.source == nil {
		return identity{}, nil
	}
	set := h.principals(r.Context())
	if v := r.Header.Get("Authorization"); v != "" {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			// The token first (in constant time), the throttle only for a wrong one: a right
			// token always passes, whatever its address's failures.
			p, ok := set.Authenticate(strings.TrimSpace(t))
			if ok {
				return identity{principal: p, ok: true}, nil
			}
			if h.refused(r, "bearer token") {
				return identity{}, errLocked
			}
			return identity{}, errBadToken
		}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return identity{}, nil
	}
	id, err := url.QueryUnescape(c.Value) // a cookie value may arrive percent-encoded
	if err != nil {
		return identity{}, nil
	}
	s, err := h.client.APISessions().Get(r.Context(), id)
	if errors.Is(err, taskling.ErrNotFound) {
		return identity{}, nil
	}
	if err != nil {
		return identity{}, err
	}
	p, ok := set.Lookup(s.Principal)
	if !ok || s.Credential != credential(p) {
		return identity{}, nil // its token was removed or replaced (the session ends as it is seen)
	}
	return identity{principal: p, session: id, ok: true}, nil
}

// principals returns the principals known now; when the file changed, the sessions of the
// principals it no longer has with the same token end, and a refused file is logged.
func (h *Handler) principals(ctx context.Context) *principals.Set {
	set, change := h.source.Current()
	if change == nil {
		return set
	}
	if change.Problem != "" {
		h.log.Error("taskling http: the principals file is refused; until it is fixed only TASKLING_API_TOKEN signs in",
			zap.String("file", h.opts.PrincipalsFile), zap.String("problem", change.Problem))
	}
	if len(change.Gone) > 0 {
		// Not bound by the request's context: the rows go even if its client leaves. Should it
		// fail, the sessions are refused anyway, as their credential no longer matches.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.RequestTimeout)
		defer cancel()
		n, err := h.client.APISessions().EndAll(ctx, change.Gone...)
		if err != nil {
			h.log.Error("taskling http: end the sessions of removed principals", zap.Strings("principals", change.Gone), zap.Error(err))
			return set
		}
		h.log.Info("taskling http: principals removed or given a new token; their sessions ended",
			zap.Strings("principals", change.Gone), zap.Int64("sessions", n))
	}
	return set
}

// credential is what a session of p is checked against: a fingerprint of its token's hash, so
// that a new token for the same name ends the session (the table never holds the hash itself).
func credential(p principals.Principal) string {
	sum := sha256.Sum256([]byte("taskling session credential\x00" + p.TokenSHA256))
	return hex.EncodeToString(sum[:8])
}

// refused counts a refused credential against the request's client address and logs it —
// never the token; it reports whether the answer is 429 (the address is locked out, or the
// server's budget of refusals is spent). While it is, refusals are not logged one by one.
func (h *Handler) refused(r *http.Request, how string) (throttled bool) {
	from := h.remote(r)
	v := h.failures.fail(from.key, time.Now())
	if !v.throttled {
		h.log.Warn("taskling http: sign-in refused", zap.String("remote", from.addr), zap.String("with", how), zap.Int("failures_in_last_minute", v.recent))
	}
	if v.lockedNow {
		h.log.Warn("taskling http: too many failed sign-ins; the address gets 429 for wrong tokens for a while",
			zap.String("remote", from.addr), zap.String("counted_as", from.key), zap.Duration("for", lockout))
	}
	if v.spentNow {
		h.log.Warn("taskling http: too many failed sign-ins from all addresses; every wrong token gets 429 for a while",
			zap.Int("failures_in_last_minute", failureBudget))
	}
	return v.throttled
}

// denied answers a request whose authentication failed or is missing.
func (h *Handler) denied(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errLocked):
		tooManyFailures(w)
	case err == nil, errors.Is(err, errBadToken):
		unauthorized(w)
	default:
		h.fail(w, r, err)
	}
}

// readsProtected reports whether reads need authentication.
func (h *Handler) readsProtected() bool { return h.source != nil && !h.opts.PublicReads }

func (h *Handler) readAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.readsProtected() {
			if id, err := h.identify(r); !id.ok {
				h.denied(w, r, err)
				return
			}
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
		if h.source == nil {
			writeError(w, http.StatusForbidden, "", "the server is read-only: start it with principals (--principals) or an API token (TASKLING_API_TOKEN) to allow changes")
			return
		}
		id, err := h.identify(r)
		var foreignField, foreignMsg string
		if id.session != "" {
			// The cookie rides along whatever page sent the request: it must be one of ours.
			foreignField, foreignMsg = h.foreign(r)
		}
		switch {
		case !id.ok:
			h.denied(w, r, err)
			return
		case id.session != "" && r.Header.Get(requestHeader) == "":
			unauthorized(w)
			return
		case foreignField != "":
			writeError(w, http.StatusForbidden, foreignField, foreignMsg)
			return
		case !id.principal.MayChange():
			writeError(w, http.StatusForbidden, "", "principal "+strconv.Quote(id.principal.Name)+" has the "+string(id.principal.Role)+" role: changes need the operate role")
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

// as returns the operator changes of the request's principal (writeAccess let it through), with
// the note the request gives.
func (h *Handler) as(r *http.Request, note string) *taskling.Operations {
	id, _ := h.identify(r)
	return h.client.As(taskling.Operator{Name: id.principal.Name, Note: note})
}

// pageAccess guards the dashboard's pages: without authentication, a protected page is the
// sign-in form.
func (h *Handler) pageAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.readsProtected() {
			id, err := h.identify(r)
			switch {
			case errors.Is(err, errLocked):
				h.renderLogin(w, r, http.StatusTooManyRequests, lockedProblem)
				return
			case err != nil && !errors.Is(err, errBadToken):
				h.fail(w, r, err)
				return
			case !id.ok:
				h.renderLogin(w, r, http.StatusUnauthorized, "")
				return
			}
		}
		next(w, r)
	})
}

// What the sign-in page says when a page of another site posted to /login or /logout.
const (
	foreignSignIn  = "Refused: this sign-in was sent by a page of another site. Sign in here instead."
	foreignSignOut = "Refused: this sign-out was sent by a page of another site; you are still signed in. Use the Sign out button of the dashboard."
)

const lockedProblem = "Too many failed sign-ins lately, from your address or to this server: that token is not right; wait a minute before trying again."

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	p := h.basePage(r, "Sign in")
	next := strings.TrimPrefix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost:
		next = r.PostFormValue("next")
	case next == "login":
		next = r.URL.Query().Get("next")
	case r.URL.RawQuery != "":
		next += "?" + r.URL.RawQuery // task?app=A&task=T names its task there
	}
	next = safeNext(next)
	p.Data = loginData{Next: next, Problem: problem}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int(lockout.Seconds())))
	}
	h.render(w, r, status, "login", p)
}

type loginData struct {
	Next    string // where to go after signing in, relative to the handler's root
	Problem string
}

// login checks the token posted by the sign-in form and starts a session.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.source == nil {
		writeError(w, http.StatusNotFound, "", "this server has no principals: there is nothing to sign in to")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if field, _ := h.foreign(r); field != "" {
		h.renderLogin(w, r, http.StatusForbidden, foreignSignIn)
		return
	}
	p, ok := h.principals(r.Context()).Authenticate(r.PostFormValue("token"))
	if !ok {
		if h.refused(r, "sign-in form") {
			h.renderLogin(w, r, http.StatusTooManyRequests, lockedProblem)
			return
		}
		h.renderLogin(w, r, http.StatusUnauthorized, "That is not the token of any principal of this server.")
		return
	}
	id, err := h.client.APISessions().Start(r.Context(), p.Name, credential(p), sessionMaxAge)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	http.SetCookie(w, h.cookie(r, id, int(sessionMaxAge.Seconds())))
	http.Redirect(w, r, h.opts.BasePath+safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the browser's session, on every replica.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if field, _ := h.foreign(r); field != "" {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		h.renderLogin(w, r, http.StatusForbidden, foreignSignOut)
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		if id, err := url.QueryUnescape(c.Value); err == nil {
			if err := h.client.APISessions().End(r.Context(), id); err != nil {
				h.fail(w, r, err)
				return
			}
		}
	}
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
	writeError(w, http.StatusUnauthorized, "Authorization", "missing or wrong bearer token (Authorization: Bearer $TASKLING_API_TOKEN, or a principal's token)")
}

func tooManyFailures(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(lockout.Seconds())))
	writeError(w, http.StatusTooManyRequests, "Authorization", "wrong bearer token, and too many failed sign-ins lately, from this address or to this server: wait a minute before trying again")
}
