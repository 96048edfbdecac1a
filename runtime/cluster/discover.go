package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Address forms accepted wherever this package takes a list of node
// addresses (Config.Seeds, FollowConfig.Nodes):
//
//	host:port              as given (a host name is resolved by whoever dials it)
//	dns+name:port          every A and AAAA address of name, with port
//	dnssrv+_svc._tcp.name  every SRV target of the name, with the target's port
//
// The DNS forms are resolved again at every use, so that a list that
// names a Kubernetes headless service follows the pods as they come and go.
const (
	dnsPrefix    = "dns+"
	dnssrvPrefix = "dnssrv+"
)

// ErrBadAddress is returned for an address list entry in none of the
// accepted forms.
var ErrBadAddress = errors.New("cluster: bad address")

// checkAddress reports an entry that can never resolve, so that a typo
// fails at start, not on every retry.
func checkAddress(s string) error {
	switch {
	case strings.HasPrefix(s, dnssrvPrefix):
		if name := strings.TrimPrefix(s, dnssrvPrefix); name == "" || strings.Contains(name, ":") {
			return fmt.Errorf("%w %q: want dnssrv+_service._proto.name, without a port (SRV records carry it)", ErrBadAddress, s)
		}
		return nil
	case strings.HasPrefix(s, dnsPrefix):
		s = strings.TrimPrefix(s, dnsPrefix)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadAddress, s, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 || host == "" {
		return fmt.Errorf("%w %q: want host:port with a port in 1-65535", ErrBadAddress, s)
	}
	return nil
}

// checkAddresses checks every entry of a list.
func checkAddresses(list []string) error {
	var errs []error
	for _, s := range list {
		if s == "" {
			continue
		}
		if err := checkAddress(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hasDNS reports whether any entry is resolved by this package.
func hasDNS(list []string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, dnsPrefix) || strings.HasPrefix(s, dnssrvPrefix) {
			return true
		}
	}
	return false
}

// Resolve expands the DNS entries of list (see the forms above) into
// "ip:port" addresses, keeps the others as they are, and drops duplicates,
// in order. r nil means net.DefaultResolver. An entry that fails to
// resolve is reported in the error while the others are still returned,
// since one missing name must not hide the nodes that are there.
func Resolve(ctx context.Context, r *net.Resolver, list []string) ([]string, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	var errs []error
	for _, s := range list {
		if s == "" {
			continue
		}
		addrs, err := resolveOne(ctx, r, s)
		if err != nil {
			errs = append(errs, err)
		}
		for _, a := range addrs {
			add(a)
		}
	}
	return out, errors.Join(errs...)
}

func resolveOne(ctx context.Context, r *net.Resolver, s string) ([]string, error) {
	if err := checkAddress(s); err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(s, dnssrvPrefix):
		name := strings.TrimPrefix(s, dnssrvPrefix)
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, fmt.Errorf("cluster: resolve %s: %w", s, err)
		}
		var out []string
		var errs []error
		for _, srv := range srvs {
			ips, err := r.LookupHost(ctx, srv.Target)
			if err != nil {
				errs = append(errs, fmt.Errorf("cluster: resolve %s: target %s: %w", s, srv.Target, err))
				continue
			}
			for _, ip := range ips {
				out = append(out, net.JoinHostPort(ip, strconv.Itoa(int(srv.Port))))
			}
		}
		return out, errors.Join(errs...)
	case strings.HasPrefix(s, dnsPrefix):
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(s, dnsPrefix))
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("cluster: resolve %s: %w", s, err)
		}
		out := make([]string, len(ips))
		for i, ip := range ips {
			out[i] = net.JoinHostPort(ip, port)
		}
		return out, nil
	}
	return []string{s}, nil
}
