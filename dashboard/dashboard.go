// Package dashboard serves taskling's operator surface over HTTP, for mounting in your own
// server: the web dashboard at "/", the JSON API under "/api/v1/" and Prometheus metrics at
// "/metrics". `taskling serve` serves the same handler.
//
// It is a separate package, not a function of package taskling, so that programs that only run
// tasks never link the templates and static files; the implementation lives in an internal
// package, so that its routes and templates can change without breaking this small surface.
//
//	h, err := dashboard.NewHandler(client, &dashboard.Options{Token: os.Getenv("TASKLING_API_TOKEN"), BasePath: "/taskling/"})
//	if err != nil { … }
//	mux.Handle("/taskling/", http.StripPrefix("/taskling", h)) // the dashboard links are relative
//
// Routes:
//
//	GET    /api/v1/tasks                                 the tasks: limit in force and its source, slot usage, last execution
//	GET    /api/v1/tasks/{app}/{task}                    one task with its slots and their holders
//	GET    /api/v1/tasks/{app}/{task}/executions         its executions, newest first (?status=&limit=&before=)
//	GET    /api/v1/executions/{id}                       one execution with its events and progress
//	PATCH  /api/v1/tasks/{app}/{task}/overrides          set operator overrides (operate role)
//	DELETE /api/v1/tasks/{app}/{task}/overrides          clear them (operate role)
//	POST   /api/v1/tasks/{app}/{task}/retire             retire the task, or its schedule only (operate role)
//	POST   /api/v1/tasks/{app}/{task}/unretire           unretire it (operate role)
//	GET    /api/v1/tasks/{app}/{task}/changes            its operator changes, newest first (?limit=&before=)
//	POST   /api/v1/tasks/{app}/{task}/submissions        submit a run: 201 {"id"} (operate role)
//	GET    /api/v1/tasks/{app}/{task}/submissions        its submissions (?status=&limit=&before=)
//	GET    /api/v1/submissions/{id}                      one submission: status, position, attempts, progress
//	POST   /api/v1/submissions/{id}/cancel               cancel it: 409 once finished (operate role)
//	GET    /api/v1/executions/{id}/blocks                the blocks an execution attempted
//	GET    /api/v1/tasks/{app}/{task}/blocks             its blocks (?at_retry_limit=true&limit=)
//	GET    /api/v1/blocks/{id}                           one block with its attempts
//	POST   /api/v1/blocks/{id}/force                     force it to run again (operate role)
//	GET    /metrics                                      the client's Prometheus metrics
//	GET    /, /tasks/{app}/{task}, /submissions/{id},    the dashboard
//	       /executions/{id}, /blocks/{id}
//	GET    /login, POST /login, POST /logout             the dashboard's sign-in
//
// Access. The handler's principals are those of Options.PrincipalsFile, each with a name, a
// role and the SHA-256 of its token, and Options.Token (TASKLING_API_TOKEN for `taskling serve`,
// at least 32 bytes), the principal "token" of the operate role. The file is TOML:
//
//	[[principal]]
//	name = "alice"              # 1 to 64 letters, digits and ._@+-
//	role = "operate"            # or "read"
//	token_sha256 = "…"          # lowercase hex of the SHA-256 of alice's token
//
// (`taskling tokens add alice --role operate --file FILE` makes a token and appends it). The
// file is read again when it changes, within a second of the next request; a principal removed
// or given a new token loses its sessions; an invalid file leaves only Options.Token signing in
// until it is fixed (and is logged). With neither Token nor PrincipalsFile the handler is
// read-only: every read is public and every change gets 403. With either (even a file without a
// principal yet):
//   - reads — the API, the pages and /metrics — need a principal, unless Options.PublicReads
//     (or, for /metrics alone, Options.PublicMetrics) opens them; changes need one of the
//     operate role (a read principal gets 403);
//   - scripts and Prometheus send "Authorization: Bearer <token>";
//   - a browser signs in once with its token (the dashboard shows the form) and keeps a session
//     cookie: a random id, stored as its SHA-256 in the database (so every server sharing it
//     knows the session, and signing out on one ends it on all), for 12 hours. It is HttpOnly,
//     SameSite=Strict, scoped to Options.BasePath and Secure behind TLS. A change made with it
//     must also carry the X-Taskling-Request header, which the dashboard's own script sends and
//     a cross-site form cannot. A principal keeps at most taskling.MaxAPISessionsPerPrincipal
//     (20) sessions: a sign-in past them ends its oldest;
//   - POST /login, POST /logout and every change made with the session cookie are refused (403)
//     when the browser says they come from a page of another site: a Sec-Fetch-Site header other
//     than same-origin or none, or an Origin header naming a host not in Options.AllowedHosts
//     (ports ignored) or, with no such list, other than the request's Host (port included).
//     Clients that send neither header, such as scripts with a bearer token, pass;
//   - a right token always passes; refused ones (a wrong token on the form, or as a bearer
//     token) are logged with the client's address, never the token, and counted in each
//     handler's memory: after 10 from one address within a minute (an IPv6 address counted by
//     its /64), that address's wrong tokens get 429 for 60 s, renewed while it keeps failing,
//     and after 1000 from all addresses within a minute, every wrong token does until the last
//     minute's fall below that. The address is the connection's, or behind
//     Options.TrustedProxies the client X-Forwarded-For names;
//   - with Options.AllowedHosts, a request naming another host gets 421, whatever its
//     credentials.
//
// The handler sends no Strict-Transport-Security header: that is the serving program's to
// decide, for its whole host (`taskling serve --tls-cert` sends max-age=31536000).
//
// A change with a body needs Content-Type: application/json; a body with anything after its
// JSON object is refused. A submission's body, {"header", "reference_value", "priority",
// "max_attempts"}, is optional, as is a cancel's {"reason"}; a duplicate reference_value answers
// 201 with the first submission's id. Errors are JSON objects {"error": {"status", "field", "message"}} naming the field at
// fault; a 500 shows no details (they go to Options.Logger). Each request's database work is
// bounded by Options.RequestTimeout.
//
// Every change is recorded in its task's changes with the principal that made it ("principal")
// and, as its "by", the note a body gives — a retire's or an override's "by", a force's
// "forced_by" — or else the principal's name.
package dashboard

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// Options configure the handler. A nil *Options, or the zero value, serves everything read-only
// and without auth.
type Options struct {
	// Token is the single API token: the principal "token", of the operate role (see the package
	// doc). It must be at least 32 bytes. `taskling serve` reads it from TASKLING_API_TOKEN.
	Token string
	// PrincipalsFile is the path of a principals file (see the package doc): named principals,
	// each of the read or the operate role, known by the SHA-256 of their token. It is read by
	// NewHandler (an invalid file is an error) and read again when it changes, within a second
	// of the next request. With neither Token nor PrincipalsFile the handler is read-only.
	PrincipalsFile string
	// AllowedHosts are the host names (or addresses) requests may name in their Host header,
	// ports ignored; another gets 421 Misdirected Request, whatever its credentials. nil (or
	// "*" among them) allows any: the server it is mounted in decides.
	AllowedHosts []string
	// TrustedProxies are the proxies in front of the handler, as CIDR ranges ("10.0.0.0/8",
	// "fd00::/8") or single addresses. A request from one of them is counted as from the client
	// its X-Forwarded-For names: read right to left (every header line, each a comma-separated
	// list), the first address not in these ranges; a malformed entry stops the walk at the last
	// trusted hop, and when every entry is trusted the leftmost is taken. nil: the connection's
	// peer is the client, and X-Forwarded-For is ignored.
	TrustedProxies []string
	// PublicReads serves reads (the API, the pages, /metrics) without the token; changes still
	// need it.
	PublicReads bool
	// PublicMetrics serves /metrics without the token while other reads stay protected.
	PublicMetrics bool
	// BasePath is the path the handler is mounted at, like "/taskling/" (default "/"): the
	// session cookie is scoped to it, and sign-in redirects stay under it.
	BasePath string
	// Logger receives the errors behind 500 responses, refused sign-ins (with the client's
	// address, never the token) and the principals file's problems. nil: no logging.
	Logger *zap.Logger
	// RefreshInterval of the dashboard's auto-refresh. Default 2s.
	RefreshInterval time.Duration
	// RequestTimeout bounds the database work of each request (503 when it passes). Default 10s.
	RequestTimeout time.Duration
	// ProtectReads is ignored.
	//
	// Deprecated: reads are protected whenever Token is set; PublicReads opens them.
	ProtectReads bool
}

// MinTokenLength is the shortest Options.Token accepted.
const MinTokenLength = httpapi.MinTokenLength

// NewHandler returns the handler serving client's tasks. It fails only on invalid Options (a
// token shorter than MinTokenLength, an unreadable or invalid principals file, a malformed
// BasePath or allowed host) or a nil client.
func NewHandler(client *taskling.Client, opts *Options) (http.Handler, error) {
	if opts == nil {
		opts = &Options{}
	}
	return httpapi.New(client, &httpapi.Options{
		Token: opts.Token, PrincipalsFile: opts.PrincipalsFile, AllowedHosts: opts.AllowedHosts, TrustedProxies: opts.TrustedProxies,
		PublicReads: opts.PublicReads, PublicMetrics: opts.PublicMetrics, BasePath: opts.BasePath,
		Logger: opts.Logger, RefreshInterval: opts.RefreshInterval, RequestTimeout: opts.RequestTimeout,
	})
}
