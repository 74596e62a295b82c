// s11mme: an MME's S11 side built from the go-gtp library (github.com/wmnsk/go-gtp, an implementation
// independent of mobicore), used by scripts/interop.sh. For each subscriber it runs what an MME does on
// S11 for an attach and a detach (TS 23.401 5.3.2.1, 5.3.8.2): Create Session, Modify Bearer with the
// eNB's S1-U F-TEID, Delete Session; it checks the answers against TS 29.274 7.2.2, 7.2.8 and 7.2.10
// and prints one line per subscriber. With -dn it also carries each subscriber's traffic between the
// Modify Bearer and the Delete Session, as the eNB (package gtpu, on go-gtp's user plane): datagrams to
// an echo server in the data network through the S-GW's S1-U F-TEID, echoes back on the eNB's TEID,
// and nothing once the session is deleted. Exit status 0 when every subscriber passed every check.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/wmnsk/go-gtp/gtpv2"
	"github.com/wmnsk/go-gtp/gtpv2/ie"
	"github.com/wmnsk/go-gtp/gtpv2/message"
	"mobicore.local/interop/gtpu"
)

type client struct {
	conn *net.UDPConn
	sgw  *net.UDPAddr
	seq  uint32
	dn   *net.UDPAddr // the data network's echo server; nil: no traffic
	enb  *gtpu.ENB    // the eNB's S1-U endpoint, bound at the first traffic
	n    int          // datagrams per subscriber
}

// request sends msg and waits for the answer with its sequence number (T3 = 2 s, N3 = 2, TS 29.274 7.6).
func (c *client) request(msg message.Message) (message.Message, error) {
	c.seq++
	msg.SetSequenceNumber(c.seq)
	b, err := message.Marshal(msg)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for try := 0; try < 3; try++ {
		if _, err := c.conn.WriteToUDP(b, c.sgw); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			_ = c.conn.SetReadDeadline(deadline)
			n, _, err := c.conn.ReadFromUDP(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return nil, err
			}
			ans, err := message.Parse(buf[:n])
			if err != nil {
				return nil, fmt.Errorf("undecodable answer to %s: %w", msg.MessageTypeName(), err)
			}
			if ans.Sequence() == c.seq {
				return ans, nil
			}
		}
	}
	return nil, fmt.Errorf("no answer to %s (3 tries, 2 s apart)", msg.MessageTypeName())
}

func cause(i *ie.IE, what string) error {
	if i == nil {
		return fmt.Errorf("%s without Cause", what)
	}
	v, err := i.Cause()
	if err != nil {
		return fmt.Errorf("%s: Cause: %w", what, err)
	}
	if v != gtpv2.CauseRequestAccepted {
		return fmt.Errorf("%s: Cause %d, not Request accepted (16)", what, v)
	}
	return nil
}

// fteid finds the F-TEID child of a grouped IE with the interface type given.
func fteid(group *ie.IE, ifType uint8) (uint32, string, bool) {
	if group == nil {
		return 0, "", false
	}
	for _, c := range group.ChildIEs {
		if c.Type != ie.FullyQualifiedTEID {
			continue
		}
		if t, err := c.InterfaceType(); err == nil && t == ifType {
			teid, _ := c.TEID()
			ip, _ := c.IPAddress()
			return teid, ip, true
		}
	}
	return 0, "", false
}

type subscriber struct {
	imsi, msisdn, imei, ueIP string
	enbTEID                  uint32
}

func (c *client) attachDetach(s subscriber, localIP, pgwIP, enbIP, apn string, mmeTEID uint32) (string, error) {
	const ebi = 5
	csr := message.NewCreateSessionRequest(0, 0,
		ie.NewIMSI(s.imsi),
		ie.NewMSISDN(s.msisdn),
		ie.NewMobileEquipmentIdentity(s.imei),
		ie.NewUserLocationInformationStruct(nil, nil, nil, ie.NewTAI("001", "01", 0x0001), ie.NewECGI("001", "01", 0x00000101), nil, nil, nil),
		ie.NewServingNetwork("001", "01"),
		ie.NewRATType(gtpv2.RATTypeEUTRAN),
		ie.NewFullyQualifiedTEID(gtpv2.IFTypeS11MMEGTPC, mmeTEID, localIP, ""),
		ie.NewFullyQualifiedTEID(gtpv2.IFTypeS5S8PGWGTPC, 0, pgwIP, "").WithInstance(1),
		ie.NewAccessPointName(apn),
		ie.NewSelectionMode(gtpv2.SelectionModeMSorNetworkProvidedAPNSubscribedVerified),
		ie.NewPDNType(gtpv2.PDNTypeIPv4),
		ie.NewPDNAddressAllocation(s.ueIP),
		ie.NewAPNRestriction(gtpv2.APNRestrictionNoExistingContextsorRestriction),
		ie.NewAggregateMaximumBitRate(100000, 100000),
		ie.NewBearerContext(
			ie.NewEPSBearerID(ebi),
			ie.NewBearerQoS(0, 9, 0, 9, 0, 0, 0, 0),
		),
		ie.NewUETimeZone(0, 0),
	)
	ans, err := c.request(csr)
	if err != nil {
		return "", err
	}
	csa, ok := ans.(*message.CreateSessionResponse)
	if !ok {
		return "", fmt.Errorf("answer to Create Session Request is %s", ans.MessageTypeName())
	}
	if ans.TEID() != mmeTEID {
		return "", fmt.Errorf("Create Session Response on TEID %#x, not the MME's %#x", ans.TEID(), mmeTEID)
	}
	if err := cause(csa.Cause, "Create Session Response"); err != nil {
		return "", err
	}
	if csa.SenderFTEIDC == nil {
		return "", errors.New("Create Session Response without Sender F-TEID for Control Plane")
	}
	sgwTEID, err := csa.SenderFTEIDC.TEID()
	if err != nil {
		return "", fmt.Errorf("Sender F-TEID: %w", err)
	}
	if csa.PGWS5S8FTEIDC == nil {
		return "", errors.New("Create Session Response without PGW S5/S8 F-TEID for Control Plane (instance 1, TS 29.274 Table 7.2.2-1)")
	}
	if csa.PAA == nil {
		return "", errors.New("Create Session Response without PAA")
	}
	ip, err := csa.PAA.IPAddress()
	if err != nil {
		return "", fmt.Errorf("PAA: %w", err)
	}
	if ip != s.ueIP {
		return "", fmt.Errorf("PAA %s, not the static address %s asked for", ip, s.ueIP)
	}
	if len(csa.BearerContextsCreated) == 0 {
		return "", errors.New("Create Session Response without Bearer Context created")
	}
	bc := csa.BearerContextsCreated[0]
	var bcCause *ie.IE
	for _, c := range bc.ChildIEs {
		if c.Type == ie.Cause {
			bcCause = c
		}
	}
	if err := cause(bcCause, "Bearer Context created"); err != nil {
		return "", err
	}
	s1uTEID, s1uIP, ok := fteid(bc, gtpv2.IFTypeS1USGWGTPU)
	if !ok {
		return "", errors.New("Bearer Context created without S1-U SGW F-TEID")
	}

	mbr := message.NewModifyBearerRequest(sgwTEID, 0,
		ie.NewBearerContext(ie.NewEPSBearerID(ebi), ie.NewFullyQualifiedTEID(gtpv2.IFTypeS1UeNodeBGTPU, s.enbTEID, enbIP, "")),
	)
	if ans, err = c.request(mbr); err != nil {
		return "", err
	}
	mba, ok := ans.(*message.ModifyBearerResponse)
	if !ok {
		return "", fmt.Errorf("answer to Modify Bearer Request is %s", ans.MessageTypeName())
	}
	if err := cause(mba.Cause, "Modify Bearer Response"); err != nil {
		return "", err
	}
	if len(mba.BearerContextsModified) == 0 {
		return "", errors.New("Modify Bearer Response without Bearer Context modified")
	}

	var flow gtpu.Flow
	if c.dn != nil {
		up := &net.UDPAddr{IP: net.ParseIP(s1uIP), Port: 2152}
		if c.enb == nil {
			if c.enb, err = gtpu.Dial(context.Background(), enbIP, up); err != nil {
				return "", err
			}
		}
		flow = gtpu.Flow{UE: net.ParseIP(ip), DN: c.dn, UpAddr: up, UpTEID: s1uTEID, DownTEID: s.enbTEID}
		if err := c.enb.RoundTrip(flow, c.n); err != nil {
			return "", fmt.Errorf("traffic: %w", err)
		}
	}

	dsr := message.NewDeleteSessionRequest(sgwTEID, 0,
		ie.NewEPSBearerID(ebi),
		ie.NewIndicationFromOctets(0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00), // OI: operation indication (detach)
	)
	if ans, err = c.request(dsr); err != nil {
		return "", err
	}
	dsa, ok := ans.(*message.DeleteSessionResponse)
	if !ok {
		return "", fmt.Errorf("answer to Delete Session Request is %s", ans.MessageTypeName())
	}
	if err := cause(dsa.Cause, "Delete Session Response"); err != nil {
		return "", err
	}
	// A second Delete Session Request for the released session: Context Not Found (TS 29.274 7.2.10).
	if ans, err = c.request(message.NewDeleteSessionRequest(sgwTEID, 0, ie.NewEPSBearerID(ebi))); err != nil {
		return "", err
	}
	if dsa, ok = ans.(*message.DeleteSessionResponse); !ok || dsa.Cause == nil {
		return "", errors.New("no Delete Session Response with a Cause for a released session")
	}
	if v, _ := dsa.Cause.Cause(); v != gtpv2.CauseContextNotFound {
		return "", fmt.Errorf("second Delete Session Request: Cause %d, not Context Not Found (64)", v)
	}
	var extra string
	if c.dn != nil {
		if err := c.enb.Silent(flow); err != nil {
			return "", fmt.Errorf("after Delete Session: %w", err)
		}
		extra = fmt.Sprintf(" traffic=%d/%d echoed, none after delete", c.n, c.n)
	}
	if id, _, ok := findChargingID(bc); ok {
		extra = fmt.Sprintf(" charging-id=%d", id)
	}
	return fmt.Sprintf("ue=%s s11-sgw-teid=%#x s1u-sgw=%s/%#x%s", ip, sgwTEID, s1uIP, s1uTEID, extra), nil
}

func (c *client) echo() error {
	ans, err := c.request(message.NewEchoRequest(0, ie.NewRecovery(0)))
	if err != nil {
		return err
	}
	e, ok := ans.(*message.EchoResponse)
	if !ok {
		return fmt.Errorf("answer to Echo Request is %s", ans.MessageTypeName())
	}
	if e.Recovery == nil {
		return errors.New("Echo Response without Recovery")
	}
	return nil
}

func (c *client) unknownTEID(enbIP string) error {
	mbr := message.NewModifyBearerRequest(0x7eadbeef, 0,
		ie.NewBearerContext(ie.NewEPSBearerID(5), ie.NewFullyQualifiedTEID(gtpv2.IFTypeS1UeNodeBGTPU, 1, enbIP, "")),
	)
	ans, err := c.request(mbr)
	if err != nil {
		return err
	}
	mba, ok := ans.(*message.ModifyBearerResponse)
	if !ok || mba.Cause == nil {
		return fmt.Errorf("answer is %s without a Cause", ans.MessageTypeName())
	}
	if v, _ := mba.Cause.Cause(); v != gtpv2.CauseContextNotFound {
		return fmt.Errorf("Cause %d, not Context Not Found (64)", v)
	}
	return nil
}

func findChargingID(bc *ie.IE) (uint32, int, bool) {
	for _, c := range bc.ChildIEs {
		if c.Type == ie.ChargingID {
			id, err := c.ChargingID()
			return id, 0, err == nil
		}
	}
	return 0, 0, false
}

func main() {
	sgw := flag.String("sgw", "127.0.0.61:2123", "S-GW S11 address")
	local := flag.String("local", "127.0.0.65", "local S11 IP (port 2123)")
	pgw := flag.String("pgw", "127.0.0.61", "PGW S5/S8-C address put in the Create Session Request")
	enb := flag.String("enb", "127.0.0.64", "eNB S1-U address put in the Modify Bearer Request")
	apn := flag.String("apn", "internet", "APN")
	first := flag.Uint64("first-imsi", 1010000002001, "first IMSI (MCC 001, MNC 01)")
	n := flag.Int("n", 3, "subscribers")
	dn := flag.String("dn", "", "an echo server in the data network (e.g. 192.0.2.10:7): carry traffic")
	datagrams := flag.Int("datagrams", 5, "with -dn: datagrams per subscriber")
	flag.Parse()

	raddr, err := net.ResolveUDPAddr("udp", *sgw)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(*local), Port: 2123})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c := &client{conn: conn, sgw: raddr, n: *datagrams}
	if *dn != "" {
		if c.dn, err = net.ResolveUDPAddr("udp", *dn); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	failed := 0
	// Path management first (TS 29.274 7.1.1): an Echo Response carries the S-GW's Recovery.
	if err := c.echo(); err != nil {
		failed++
		fmt.Printf("FAIL echo: %v\n", err)
	} else {
		fmt.Println("ok   echo: Echo Response with Recovery")
	}
	// A Modify Bearer Request for a TEID the S-GW never gave: Context Not Found (TS 29.274 7.2.8).
	if err := c.unknownTEID(*enb); err != nil {
		failed++
		fmt.Printf("FAIL unknown TEID: %v\n", err)
	} else {
		fmt.Println("ok   unknown TEID: Modify Bearer Response with Context Not Found (64)")
	}
	for i := 0; i < *n; i++ {
		s := subscriber{
			imsi:    fmt.Sprintf("%015d", *first+uint64(i)),
			msisdn:  fmt.Sprintf("8140000%05d", 2001+i),
			imei:    fmt.Sprintf("35%013d", 2001+i),
			ueIP:    fmt.Sprintf("10.47.0.%d", i+1),
			enbTEID: uint32(0x100 + i),
		}
		detail, err := c.attachDetach(s, *local, *pgw, *enb, *apn, uint32(0x1000+i))
		if err != nil {
			failed++
			fmt.Printf("FAIL imsi=%s: %v\n", s.imsi, err)
			continue
		}
		fmt.Printf("ok   imsi=%s create/modify/delete: %s\n", s.imsi, detail)
	}
	fmt.Printf("s11mme: %d check(s) failed (%d subscribers)\n", failed, *n)
	if failed > 0 {
		os.Exit(1)
	}
}
