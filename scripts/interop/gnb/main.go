// gnb: the eNB/gNB side of scripts/interop.sh's row 5, on go-gtp's user-plane library. pfcpsim (SD-Core's
// PFCP simulator, acting as SGW-C/SMF) numbers its sessions baseID, baseID+10, ...: session i has the
// uplink TEID i, the downlink TEID i+1 and the UE address pool+1, pool+2, ... For each session this
// sends UDP datagrams of the UE through the user plane to an echo server in the data network and
// checks every echo (-mode traffic), checks that a released session carries nothing (-mode silent), or
// both on the flows an allow and a deny filter part (-mode gated).
// Exit status 0 when every session passed.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"

	"mobicore.local/interop/gtpu"
)

func main() {
	local := flag.String("local", "127.0.0.93", "the gNB's S1-U/N3 address (UDP 2152)")
	up := flag.String("upf", "127.0.0.92", "the UPF's S1-U/N3 address")
	dn := flag.String("dn", "192.0.2.10:7", "an echo server in the data network")
	pool := flag.String("ue-pool", "10.48.0.0/24", "pfcpsim's --ue-pool")
	base := flag.Uint("base-id", 2, "pfcpsim's --baseID")
	count := flag.Int("count", 3, "pfcpsim's --count")
	n := flag.Int("n", 5, "datagrams per session")
	mode := flag.String("mode", "traffic", "traffic | silent | gated")
	flag.Parse()

	dnAddr, err := net.ResolveUDPAddr("udp", *dn)
	if err != nil {
		fail(err)
	}
	first, _, err := net.ParseCIDR(*pool)
	if err != nil {
		fail(err)
	}
	upAddr := &net.UDPAddr{IP: net.ParseIP(*up), Port: 2152}
	enb, err := gtpu.Dial(context.Background(), *local, upAddr)
	if err != nil {
		fail(err)
	}
	defer enb.Close()
	failed := 0
	for k := 0; k < *count; k++ {
		id := uint32(*base) + uint32(k)*10
		ue := make(net.IP, 4)
		binary.BigEndian.PutUint32(ue, binary.BigEndian.Uint32(first.To4())+uint32(k)+1)
		f := gtpu.Flow{UE: ue, DN: dnAddr, UpAddr: upAddr, UpTEID: id, DownTEID: id + 1}
		var what string
		switch *mode {
		case "silent":
			err, what = enb.Silent(f), "released: nothing comes back"
		case "gated":
			// pfcpsim -a 'udp:<DN>:40000-40999:allow:100' -a 'ip:any:any:deny:200': the UE's ports
			// 40000.. pass, port 39999 meets the deny filter's closed gate (TS 29.244 5.2.1, 8.2.7).
			if err = enb.RoundTrip(f, *n); err == nil {
				err = enb.Silent(f)
			}
			what = fmt.Sprintf("%d/%d datagrams of the allowed flow echoed, the denied flow dropped", *n, *n)
		default:
			err = enb.RoundTrip(f, *n)
			what = fmt.Sprintf("%d/%d datagrams echoed (uplink TEID %#x, downlink TEID %#x)", *n, *n, id, id+1)
		}
		if err != nil {
			failed++
			fmt.Printf("FAIL session %d ue=%s: %v\n", id, ue, err)
			continue
		}
		fmt.Printf("ok   session %d ue=%s: %s\n", id, ue, what)
	}
	fmt.Printf("gnb: %d of %d sessions failed\n", failed, *count)
	if failed > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gnb:", err)
	os.Exit(2)
}
