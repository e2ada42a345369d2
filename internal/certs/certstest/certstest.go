// Package certstest makes throw-away certificate authorities and
// certificates for tests: an ECDSA CA and leaf certificates for 127.0.0.1
// and localhost, usable as server and client certificates.
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

var serial int64 = 1

func nextSerial() *big.Int {
	serial++
	return big.NewInt(serial)
}

// newKey makes a P-256 key and a certificate template named name, valid
// from an hour ago for a day.
func newKey(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key, &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
	}
}

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, tmpl := newKey(t, name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a cert pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a leaf certificate for 127.0.0.1 and localhost with both
// server and client usage; it returns the cert and key PEM.
func (ca *CA) Issue(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, tmpl := newKey(t, name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// Files is a CA and one leaf written to a directory.
type Files struct {
	CA, Cert, Key string
}

// WriteFiles writes ca.pem, <name>.pem and <name>-key.pem into dir.
func (ca *CA) WriteFiles(t testing.TB, dir, name string) Files {
	t.Helper()
	c, k := ca.Issue(t, name)
	f := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	require.NoError(t, os.WriteFile(f.CA, ca.PEM, 0o600))
	require.NoError(t, os.WriteFile(f.Cert, c, 0o600))
	require.NoError(t, os.WriteFile(f.Key, k, 0o600))
	return f
}

// ClientTLS is a client configuration trusting ca and, when name is not
// empty, presenting a certificate issued by ca.
func (ca *CA) ClientTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if name != "" {
		c, k := ca.Issue(t, name)
		pair, err := tls.X509KeyPair(c, k)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}
