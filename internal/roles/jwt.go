package roles

import (
	"strings"

	"github.com/nats-io/jwt/v2"
)

// JWTPermissions returns r's permissions for a user JWT, for operator/JWT
// mode: set them as jwt.UserClaims.Permissions when signing the user of
// role r (NSCFlags gives the same with nsc). AllowResponses becomes one
// response per request, with the server's default expiry.
func (r Role) JWTPermissions() jwt.Permissions {
	p := jwt.Permissions{
		Pub: jwt.Permission{Allow: clone(r.Publish.Allow), Deny: clone(effectiveDeny(r.Publish))},
		Sub: jwt.Permission{Allow: clone(r.Subscribe.Allow), Deny: clone(effectiveDeny(r.Subscribe))},
	}
	if r.AllowResponses {
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
	}
	return p
}

// effectiveDeny returns the deny subjects of rules that some allow subject
// could match (all of them when nothing is allowed explicitly): with an
// allow list, a subject no allow matches is refused anyway, so the other
// denies change nothing. A user JWT travels in the CONNECT line, which the
// server caps (max_control_line, 4 KB by default), so the JWT leaves them
// out.
func effectiveDeny(rules Rules) []string {
	if len(rules.Allow) == 0 {
		return rules.Deny
	}
	var out []string
	for _, d := range rules.Deny {
		for _, a := range rules.Allow {
			if subjectsIntersect(a, d) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// subjectsIntersect reports whether some subject matches both patterns a
// and b (NATS wildcards: "*" one token, ">" one or more trailing tokens).
func subjectsIntersect(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i < len(at) && at[i] == ">":
			return i < len(bt)
		case i < len(bt) && bt[i] == ">":
			return i < len(at)
		case i == len(at) || i == len(bt):
			return false
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

// NSCFlags returns the flags of `nsc add user` (or `nsc edit user`) that
// give a user r's permissions, each subject single-quoted for a POSIX
// shell: the JWTPermissions (denies no allow can match left out, so the
// user JWT fits the CONNECT line).
func (r Role) NSCFlags() string {
	var parts []string
	add := func(flag string, subjects []string) {
		for _, s := range subjects {
			parts = append(parts, flag+" '"+s+"'")
		}
	}
	add("--allow-pub", r.Publish.Allow)
	add("--deny-pub", effectiveDeny(r.Publish))
	add("--allow-sub", r.Subscribe.Allow)
	add("--deny-sub", effectiveDeny(r.Subscribe))
	if r.AllowResponses {
		parts = append(parts, "--allow-pub-response 1")
	}
	return strings.Join(parts, " ")
}

func clone(s []string) jwt.StringList {
	if len(s) == 0 {
		return nil
	}
	return append(jwt.StringList(nil), s...)
}
