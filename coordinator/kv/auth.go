package kv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RootUser is etcd's administrator: the one user that may change users,
// roles and auth itself.
const RootUser = "root"

// AuthSetup says how an etcd cluster authenticates a Cairn cluster: etcd's
// root user, and one user of Cairn's whose role of the same name may read
// and write Cairn's namespace and nothing else.
type AuthSetup struct {
	// RootPassword is the root user's: it is created with it when missing.
	// Once auth is on, the store must log in as root (EtcdConfig.Username).
	RootPassword string
	// User is the user Cairn nodes log in as (--etcd-username) and the name
	// of its role.
	User string
	// UserPassword empty makes a user without a password: it can only log
	// in with a client certificate whose common name is User (etcd's
	// --client-cert-auth).
	UserPassword string
	// Namespace is Cairn's key prefix, e.g. /cairn: the role covers every
	// key under Namespace + "/".
	Namespace string
}

func (a *AuthSetup) validate() error {
	a.Namespace = strings.TrimRight(a.Namespace, "/")
	switch {
	case a.RootPassword == "":
		return errors.New("kv: auth setup: no root password")
	case a.User == "" || a.User == RootUser || strings.ContainsAny(a.User, " \t\r\n"):
		return fmt.Errorf("kv: auth setup: bad user %q (not empty, not root, no spaces)", a.User)
	case !strings.HasPrefix(a.Namespace, "/"):
		return fmt.Errorf("kv: auth setup: bad namespace %q (want a prefix like /cairn)", a.Namespace)
	}
	return nil
}

// SetupAuth creates or updates etcd's root user, Cairn's role and user
// (AuthSetup), then turns etcd's authentication on. Every step is
// idempotent, so running it again (to change the user's password, or on a
// cluster where it stopped half way) is safe. It returns what it did, one
// line per step.
func (s *EtcdStore) SetupAuth(ctx context.Context, a AuthSetup) ([]string, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var done []string
	step := func(what string, err error, tolerated ...error) error {
		for _, t := range tolerated {
			if errors.Is(err, t) {
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("kv: auth setup: %s: %w", what, mapErr(err))
		}
		done = append(done, what)
		return nil
	}
	exists, err := s.userExists(ctx, RootUser)
	if err != nil {
		return done, err
	}
	if !exists {
		if err := step("create user root", addUser(ctx, s.cli, RootUser, a.RootPassword)); err != nil {
			return done, err
		}
	}
	_, err = s.cli.UserGrantRole(ctx, RootUser, RootUser)
	if err := step("grant role root to user root", err); err != nil {
		return done, err
	}
	prefix := a.Namespace + "/"
	if err := step("create role "+a.User, roleAdd(ctx, s.cli, a.User), rpctypes.ErrRoleAlreadyExist); err != nil {
		return done, err
	}
	_, err = s.cli.RoleGrantPermission(ctx, a.User, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(authpb.READWRITE))
	if err := step(fmt.Sprintf("role %s may read and write %s*", a.User, prefix), err); err != nil {
		return done, err
	}
	if exists, err = s.userExists(ctx, a.User); err != nil {
		return done, err
	}
	if !exists {
		err = step("create user "+a.User, addUser(ctx, s.cli, a.User, a.UserPassword))
		if err != nil {
			return done, err
		}
	} else if a.UserPassword != "" {
		_, err := s.cli.UserChangePassword(ctx, a.User, a.UserPassword)
		if err := step("set the password of user "+a.User, err); err != nil {
			return done, err
		}
	}
	_, err = s.cli.UserGrantRole(ctx, a.User, a.User)
	if err := step(fmt.Sprintf("grant role %s to user %s", a.User, a.User), err); err != nil {
		return done, err
	}
	_, err = s.cli.AuthEnable(ctx)
	return done, step("enable authentication", err)
}

func (s *EtcdStore) userExists(ctx context.Context, name string) (bool, error) {
	_, err := s.cli.UserGet(ctx, name)
	if errors.Is(err, rpctypes.ErrUserNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kv: auth setup: read user %s (once auth is on, log in as root): %w", name, mapErr(err))
	}
	return true, nil
}

// addUser adds a user; without a password it can only log in with a client
// certificate.
func addUser(ctx context.Context, cli *clientv3.Client, name, password string) error {
	if password == "" {
		_, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
		return err
	}
	_, err := cli.UserAdd(ctx, name, password)
	return err
}

func roleAdd(ctx context.Context, cli *clientv3.Client, name string) error {
	_, err := cli.RoleAdd(ctx, name)
	return err
}

// AuthEnabled reports whether etcd's authentication is on (any client may
// ask).
func (s *EtcdStore) AuthEnabled(ctx context.Context) (bool, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.AuthStatus(ctx)
	if err != nil {
		return false, mapErr(err)
	}
	return resp.Enabled, nil
}
