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
		Pub: jwt.Permission{Allow: clone(r.Publish.Allow), Deny: clone(r.Publish.Deny)},
		Sub: jwt.Permission{Allow: clone(r.Subscribe.Allow), Deny: clone(r.Subscribe.Deny)},
	}
	if r.AllowResponses {
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
	}
	return p
}

// NSCFlags returns the flags of `nsc add user` (or `nsc edit user`) that
// give a user r's permissions, each subject single-quoted for a POSIX
// shell.
func (r Role) NSCFlags() string {
	var parts []string
	add := func(flag string, subjects []string) {
		for _, s := range subjects {
			parts = append(parts, flag+" '"+s+"'")
		}
	}
	add("--allow-pub", r.Publish.Allow)
	add("--deny-pub", r.Publish.Deny)
	add("--allow-sub", r.Subscribe.Allow)
	add("--deny-sub", r.Subscribe.Deny)
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
