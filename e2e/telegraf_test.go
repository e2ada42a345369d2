package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	"github.com/stretchr/testify/require"
)

// telegrafCapture is one collection of Telegraf's default inputs (cpu, mem,
// disk, diskio, net, processes, system) with the fields and types their
// READMEs give, as its influxdb output sends it. The system input sends
// uptime_format, a string, on a line of its own.
const telegrafCapture = `cpu,cpu=cpu-total,host=tg usage_user=2.5,usage_system=1.25,usage_idle=95.5,usage_nice=0,usage_iowait=0.5,usage_irq=0,usage_softirq=0.25,usage_steal=0,usage_guest=0,usage_guest_nice=0 1700000000000000000
mem,host=tg active=4294967296i,available=8589934592i,available_percent=50.5,buffered=268435456i,cached=2147483648i,free=1073741824i,inactive=1073741824i,slab=134217728i,total=17179869184i,used=8589934592i,used_percent=49.5,committed_as=6442450944i,swap_total=2147483648i,swap_free=2147483648i 1700000000000000000
disk,device=sda1,fstype=ext4,host=tg,mode=rw,path=/ free=53687091200i,inodes_free=3000000i,inodes_total=3276800i,inodes_used=276800i,total=107374182400i,used=53687091200i,used_percent=50 1700000000000000000
diskio,host=tg,name=sda io_time=123456i,iops_in_progress=0i,merged_reads=100i,merged_writes=200i,read_bytes=9876543210i,read_time=4567i,reads=123456i,weighted_io_time=234567i,write_bytes=1234567890i,write_time=7890i,writes=654321i 1700000000000000000
net,host=tg,interface=eth0 bytes_recv=123456789012i,bytes_sent=98765432109i,drop_in=0i,drop_out=0i,err_in=0i,err_out=0i,packets_recv=123456789i,packets_sent=98765432i 1700000000000000000
processes,host=tg blocked=0i,dead=0i,idle=0i,paging=0i,running=2i,sleeping=250i,stopped=0i,total=252i,total_threads=800i,unknown=0i,zombies=0i 1700000000000000000
system,host=tg load1=0.52,load15=0.31,load5=0.4,n_cpus=4i,n_users=2i 1700000000000000000
system,host=tg uptime=1249632i 1700000000000000000
system,host=tg uptime_format="14 days, 11:07" 1700000000000000000
`

// TestTelegrafCaptureStoresItsNumbers (issue 21 #2, #4): Telegraf's default
// inputs through /write and /api/v2/write are stored whole (204), the string
// field uptime_format too, and every field of every line is read back with
// its value in its type: integers as JSON integers, floats, the string.
func TestTelegrafCaptureStoresItsNumbers(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"v1": 4, "v2": 4})
	for db, path := range map[string]string{"v1": "/write?db=v1", "v2": "/api/v2/write?bucket=v2"} {
		code, msg, err := postData(p.client, "http://"+p.addr+path, []byte(telegrafCapture))
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, code, msg)

		dec := lineprotocol.NewDecoderWithBytes([]byte(telegrafCapture))
		fields := 0
		for dec.Next() {
			m, err := dec.Measurement()
			require.NoError(t, err)
			metric := string(m)
			for {
				k, _, err := dec.NextTag()
				require.NoError(t, err)
				if k == nil {
					break
				}
			}
			for {
				k, v, err := dec.NextField()
				require.NoError(t, err)
				if k == nil {
					break
				}
				var want any
				switch v.Kind() {
				case lineprotocol.String:
					want = v.StringV()
				case lineprotocol.Int:
					want = json.Number(strconv.FormatInt(v.IntV(), 10))
				default:
					want = json.Number(strconv.FormatFloat(v.FloatV(), 'f', -1, 64))
				}
				fields++
				q := fmt.Sprintf(`SELECT last(%q) FROM %q`, string(k), metric)
				code, res := influxQL(t, p.addr, db, q, "")
				require.Equal(t, 200, code, q)
				require.Empty(t, res.Results[0].Error, q)
				require.Len(t, res.Results[0].Series, 1, q)
				require.Equal(t, want, res.Results[0].Series[0].Values[0][1], q)
			}
		}
		require.Equal(t, 68, fields, "fields in the capture")
		code, res := influxQL(t, p.addr, db, "SHOW MEASUREMENTS", "")
		require.Equal(t, 200, code)
		require.Equal(t, "[[cpu] [disk] [diskio] [mem] [net] [processes] [system] [warmup]]",
			fmt.Sprint(res.Results[0].Series[0].Values), "startInfluxStandalone wrote warmup")
	}
}
