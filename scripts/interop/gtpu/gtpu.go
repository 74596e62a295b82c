// Package gtpu carries user traffic for scripts/interop.sh through go-gtp's user-plane library
// (github.com/wmnsk/go-gtp/gtpv1, an implementation independent of mobicore): as an eNB/gNB it sends
// UDP datagrams from a UE inside G-PDUs to a user plane (TS 29.281 5.1) and checks that a data
// network's echo of each one comes back inside a G-PDU on the eNB's downlink TEID.
package gtpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/wmnsk/go-gtp/gtpv1"
)

// ENB is an eNB's S1-U endpoint (UDP 2152 on its address).
type ENB struct {
	conn *gtpv1.UPlaneConn
	rx   chan tpdu
}

type tpdu struct {
	data []byte
	from net.Addr
	teid uint32
}

// Dial binds an eNB's S1-U endpoint on ip:2152 and checks with an Echo Request that the user plane
// at up answers (TS 29.281 7.2.1); go-gtp waits 5 s for the Echo Response.
func Dial(ctx context.Context, ip string, up *net.UDPAddr) (*ENB, error) {
	laddr := &net.UDPAddr{IP: net.ParseIP(ip), Port: 2152}
	conn, err := gtpv1.DialUPlane(ctx, laddr, up)
	if err != nil {
		return nil, fmt.Errorf("GTP-U Echo to %s from %s: %w", up, laddr, err)
	}
	// Our side answers G-PDUs for TEIDs it does not know with Error Indications; keep quiet here.
	conn.DisableErrorIndication()
	e := &ENB{conn: conn, rx: make(chan tpdu, 64)}
	go func() {
		for {
			buf := make([]byte, 2048)
			n, from, teid, err := conn.ReadFromGTP(buf)
			if err != nil || n == 0 && from == nil {
				close(e.rx)
				return
			}
			e.rx <- tpdu{buf[:n], from, teid}
		}
	}()
	return e, nil
}

// Close releases the endpoint.
func (e *ENB) Close() { _ = e.conn.Close() }

// Flow is one UE's bearer as the eNB sees it.
type Flow struct {
	UE       net.IP       // the UE's address
	DN       *net.UDPAddr // an echo server in the data network
	UpAddr   *net.UDPAddr // the user plane's S1-U address (port 2152)
	UpTEID   uint32       // the user plane's S1-U TEID (uplink)
	DownTEID uint32       // the eNB's TEID (downlink)
}

// next waits up to d for a downlink T-PDU.
func (e *ENB) next(d time.Duration) (tpdu, bool) {
	select {
	case t, ok := <-e.rx:
		return t, ok
	case <-time.After(d):
		return tpdu{}, false
	}
}

// RoundTrip sends n datagrams of the UE to the data network through the user plane and waits for
// each echo (2 s each): the inner packet must come back addressed to the UE from the DN, on the
// eNB's TEID, with the payload sent.
func (e *ENB) RoundTrip(f Flow, n int) error {
	for i := 0; i < n; i++ {
		payload := []byte(fmt.Sprintf("mobicore-interop ue=%s seq=%d", f.UE, i))
		pkt := ipv4UDP(f.UE, f.DN.IP, 40000+uint16(i%1000), uint16(f.DN.Port), payload)
		if _, err := e.conn.WriteToGTP(f.UpTEID, pkt, f.UpAddr); err != nil {
			return fmt.Errorf("sending G-PDU %d: %w", i, err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			t, ok := e.next(time.Until(deadline))
			if !ok {
				return fmt.Errorf("datagram %d of %s: no echo within 2 s", i, f.UE)
			}
			src, dst, data, err := parseIPv4UDP(t.data)
			if err != nil {
				return fmt.Errorf("downlink G-PDU from %s: %w", t.from, err)
			}
			if string(data) != string(payload) {
				continue // an earlier datagram's late echo
			}
			if t.teid != f.DownTEID {
				return fmt.Errorf("echo of datagram %d on TEID %#x, not the eNB's %#x", i, t.teid, f.DownTEID)
			}
			if !src.Equal(f.DN.IP) || !dst.Equal(f.UE) {
				return fmt.Errorf("echo of datagram %d is %s -> %s, not %s -> %s", i, src, dst, f.DN.IP, f.UE)
			}
			break
		}
	}
	return nil
}

// Silent sends one datagram from the UE's port 39999 and checks that no echo comes back within 1 s:
// the bearer is released, or its filters drop that flow.
func (e *ENB) Silent(f Flow) error {
	pkt := ipv4UDP(f.UE, f.DN.IP, 39999, uint16(f.DN.Port), []byte("after release"))
	if _, err := e.conn.WriteToGTP(f.UpTEID, pkt, f.UpAddr); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Second)
	for {
		t, ok := e.next(time.Until(deadline))
		if !ok {
			return nil // nothing came back
		}
		if _, _, data, err := parseIPv4UDP(t.data); err == nil && string(data) == "after release" {
			return fmt.Errorf("%s: a datagram that must be dropped came back", f.UE)
		}
	}
}

// ipv4UDP builds an IPv4/UDP packet (RFC 791, RFC 768) with both checksums.
func ipv4UDP(src, dst net.IP, sport, dport uint16, payload []byte) []byte {
	s4, d4 := src.To4(), dst.To4()
	ulen := 8 + len(payload)
	p := make([]byte, 20+ulen)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64
	p[9] = 17
	copy(p[12:16], s4)
	copy(p[16:20], d4)
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20], 0))
	u := p[20:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(ulen))
	copy(u[8:], payload)
	var pseudo uint32
	for i := 0; i < 4; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(s4[i:])) + uint32(binary.BigEndian.Uint16(d4[i:]))
	}
	pseudo += 17 + uint32(ulen)
	c := checksum(u, pseudo)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return p
}

func parseIPv4UDP(p []byte) (src, dst net.IP, payload []byte, err error) {
	if len(p) < 28 || p[0]>>4 != 4 {
		return nil, nil, nil, errors.New("not an IPv4 packet")
	}
	ihl := int(p[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(p[2:]))
	if ihl < 20 || total > len(p) || total < ihl+8 {
		return nil, nil, nil, errors.New("not a whole IPv4 packet")
	}
	if p[9] != 17 {
		return nil, nil, nil, fmt.Errorf("IPv4 protocol %d from %s, not UDP", p[9], net.IP(p[12:16]))
	}
	if checksum(p[:ihl], 0) != 0 {
		return nil, nil, nil, errors.New("bad IPv4 header checksum")
	}
	return net.IP(p[12:16]), net.IP(p[16:20]), p[ihl+8 : total], nil
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = (sum & 0xffff) + sum>>16
	}
	return ^uint16(sum)
}
