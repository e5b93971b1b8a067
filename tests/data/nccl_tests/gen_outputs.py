#!/usr/bin/env python3
"""Writes the nccl-tests and DeepEP outputs in this folder (committed; CI never runs this script).

The text follows the printing code, looked up in NVIDIA/nccl-tests:
  v2.13.8 src/common.cu: '# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup
    iters: %d iters: %d agg iters: %d validation: %d graph: %d', rank lines '#  Rank %2d Group %2d
    Pid %6d on %10s device %2d [0x%02x] %s', rows '%12li  %12li  %8s  %6s  %6s' then per
    out-of-place/in-place '  %7s  %6.2f  %6.2f  %5g' (time as %7.0f / %7.1f / %7.2f), footer
    '# Out of bounds values : %d %s' and '# Avg bus bandwidth    : %g %s';
  v2.17.1: the same plus '# Collective test starting: <program>' and bus ids [%04x:%02x:%02x];
  v2.19.6 src/util.cu: '# nccl-tests version ...', '... unalign: %d', numbers through getFloatStr
    (width 7 / 6: %.2f, else %.1f, else %.0f), '  %7s  %6s  %6s  %6g' or '    N/A' (-c 0),
    '# %-20s : %d %s' footers, '# Collective test concluded: <program>';
and DeepEP tests/test_intranode.py / test_internode.py ('[tuning] Best dispatch (BF16): SMs %d,
NVL chunk %d, %.2f GB/s (NVL), t: %.2f us'; internode '..., RDMA chunk %d: %.0f + %.0f us, %.2f
GB/s (RDMA), %.2f GB/s (NVL)').

The timings are synthetic, not measurements: t(S) = latency + bus_bytes(S) / B(S) with
B(S) = B / (1 + 256 KiB / S) (the bus bandwidth saturating with size), algbw = S / t, busbw =
algbw x nccl-tests' bus factor (PERFORMANCE.md). The noise real runs carry is added on purpose:
mpirun banners and --tag-output prefixes, NCCL INFO/WARN lines between rows, a row wrapped onto
two lines, a run cut short, #wrong non-zero, N/A columns, a test without MPI run under mpirun.

  python3 gen_outputs.py      (prints the largest-size busbw of every table)
"""
import random

HERE = __file__.rsplit('/', 1)[0] or '.'
FACTOR = {'all_reduce': lambda n: 2 * (n - 1) / n, 'all_gather': lambda n: (n - 1) / n,
          'reduce_scatter': lambda n: (n - 1) / n, 'alltoall': lambda n: (n - 1) / n,
          'sendrecv': lambda n: 1.0, 'broadcast': lambda n: 1.0}
OP = {'all_reduce': 'sum', 'reduce_scatter': 'sum', 'all_gather': 'none', 'alltoall': 'none',
      'sendrecv': 'none', 'broadcast': 'none'}


def timing(coll, n, size, lat_us, bw_gbps, rng):
    bus = size * FACTOR[coll](n)
    b = bw_gbps * 1e9 / (1 + 2**18 / max(size, 1))
    t = (lat_us + bus / b * 1e6) * rng.uniform(0.995, 1.005)
    alg = size / 1e9 / (t * 1e-6)
    return t, alg, alg * FACTOR[coll](n)


def fstr(v, width):  # util.cu getFloatStr
    for fmt in ('%*.2f', '%*.1f', '%*.0f'):
        s = fmt % (width, v)
        if len(s) <= width:
            return s
    return '%*.1e' % (width, v)


def t213(v):
    return '%7.0f' % v if v >= 10000 else '%7.1f' % v if v >= 100 else '%7.2f' % v


def row(version, coll, n, size, lat, bw, rng, wrong=0, na=False):
    count = size // 4 if coll in ('all_reduce', 'sendrecv', 'broadcast') else size // 4 // n
    out = '%12li  %12li  %8s  %6s  %6s' % (size, count, 'float', OP[coll], '%6i' % (0 if coll == 'broadcast' else -1))
    for _ in range(2):
        t, alg, bus = timing(coll, n, size, lat, bw, rng)
        if version == '2.13':
            out += '  %7s  %6.2f  %6.2f  %5g' % (t213(t), alg, bus, wrong)
        elif na:
            out += '  %7s  %6s  %6s    N/A' % (fstr(t, 7), fstr(alg, 6), fstr(bus, 6))
        else:
            out += '  %7s  %6s  %6s  %6g' % (fstr(t, 7), fstr(alg, 6), fstr(bus, 6), wrong)
    return out, bus


def header(version, program, ngpus, maxb, ranks, check=1):
    """ranks: [(rank, host, pid, dev, busid, name)]"""
    h = []
    if version == '2.19':
        h.append('# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807')
    if version in ('2.17', '2.19'):
        h.append('# Collective test starting: %s' % program)
    line = ('# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d '
            'iters: %d agg iters: %d validation: %d graph: %d' % (1, ngpus, 8, maxb, 2, 'factor', 5, 20, 1, check, 0))
    if version == '2.19':
        line += ' unalign: %d' % 0
    h += [line, '#', '# Using devices']
    for rank, host, pid, dev, bus, name in ranks:
        if version == '2.13':
            h.append('#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s' % (rank, 0, pid, host, dev, bus, name))
        else:
            h.append('#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s' % (rank, 0, pid, host, dev, 0, bus, 0, name))
    h.append('#')
    if version == '2.13':
        h.append('# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ' % ('', '', '', '', ''))
        h.append('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s' % ('size', 'count', 'type', 'redop', 'root', 'time', 'algbw', 'busbw', '#wrong', 'time', 'algbw', 'busbw', '#wrong'))
        h.append('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s' % ('(B)', '(elements)', '', '', '', '(us)', '(GB/s)', '(GB/s)', '', '(us)', '(GB/s)', '(GB/s)', ''))
    else:
        h.append('#')
        h.append('# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ' % ('', '', '', '', ''))
        h.append('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s' % ('size', 'count', 'type', 'redop', 'root', 'time', 'algbw', 'busbw', '#wrong', 'time', 'algbw', 'busbw', '#wrong', 0, ''))
        h.append('# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s' % ('(B)', '(elements)', '', '', '', '(us)', '(GB/s)', '(GB/s)', '', '(us)', '(GB/s)', '(GB/s)', '', 0, ''))
    return h


def footer(version, program, avg, errors=0):
    if version == '2.13':
        return ['# Out of bounds values : %d %s' % (errors, 'FAILED' if errors else 'OK'),
                '# Avg bus bandwidth    : %g %s' % (avg, ''), '#']
    out = ['# %-20s : %d %s' % ('Out of bounds values', errors, 'FAILED' if errors else 'OK'),
           '# %-20s : %g %s' % ('Avg bus bandwidth', avg, ''), '#']
    if version in ('2.17', '2.19'):
        out.append('# Collective test concluded: %s' % program)
    return out


def table(version, coll, ranks, lat, bw, rng, maxb=8 << 30, ngpus=1, cut_at=None, wrong_at=None,
          na=False, noise=None):
    program = coll + '_perf'
    n = len(ranks)
    lines = header(version, program, ngpus, maxb, ranks, check=0 if na else 1)
    buses = []
    size = 8
    while size <= maxb:
        r, bus = row(version, coll, n, size, lat, bw, rng, wrong=8 if size == wrong_at else 0, na=na)
        if cut_at is not None and size > cut_at:
            lines.append(r[:40])  # killed while printing
            return lines, buses
        lines.append(r)
        buses.append((size, bus))
        if noise and rng.random() < 0.15:
            lines.append(noise(rng))
        size *= 2
    avg = sum(b for _, b in buses) / len(buses)
    lines += footer(version, program, avg, errors=1 if wrong_at else 0)
    return lines, buses


def h100_ranks(hosts, per_host, pid0, single_process=False):
    busids = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb]
    out = []
    for h, host in enumerate(hosts):
        for d in range(per_host):
            pid = pid0 + h * 100 + (0 if single_process else d)
            out.append((h * per_host + d, host, pid, d, busids[d], 'NVIDIA H100 80GB HBM3'))
    return out


def nccl_info(host):
    msgs = ['NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)',
            'NCCL INFO Channel 03/0 : 7[7] -> 15[7] [send] via NET/Libfabric/3/GDRDMA',
            'NCCL WARN NET/OFI Unable to find a protocol that worked; retrying',
            'NCCL INFO Connected all trees']

    def f(rng):
        return '%s:%d:%d [%d] %s' % (host, rng.randint(9000, 9999), rng.randint(10000, 12000), rng.randint(0, 7), rng.choice(msgs))
    return f


def write(name, lines):
    with open('%s/%s' % (HERE, name), 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main():
    rng = random.Random(2026)
    report = []
    # 1. v2.13, one process driving 8 GPUs (-g 8), NVLS all-reduce on one DGX H100.
    lines, b = table('2.13', 'all_reduce', h100_ranks(['dgx-h100-01'], 8, 41234, True), 17.0, 482.0, rng, ngpus=8)
    write('all_reduce_perf-1node.txt', ['$ ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8'] + lines)
    report.append(('all_reduce_perf-1node.txt', b[-1]))
    # 2. v2.17, 8 MPI processes on one node.
    lines, b = table('2.17', 'all_gather', h100_ranks(['dgx-h100-01'], 8, 52001), 11.0, 362.0, rng)
    write('all_gather-1node.out', lines)
    report.append(('all_gather-1node.out', b[-1]))
    # 3. v2.19, 16 ranks on 2 EFA nodes under mpirun --tag-output: all_reduce then alltoall, NCCL
    #    INFO/WARN lines between rows, one alltoall row wrapped at column 80.
    hosts = ['ip-10-1-2-3', 'ip-10-1-2-4']
    ranks = h100_ranks(hosts, 8, 61000)
    noise = nccl_info('ip-10-1-2-4')
    out = ['Warning: Permanently added \'ip-10-1-2-4\' (ED25519) to the list of known hosts.',
           '+ mpirun -np 16 -N 8 --tag-output -x FI_PROVIDER=efa /opt/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 1']
    lines, b = table('2.19', 'all_reduce', ranks, 62.0, 486.0, rng, noise=noise)
    out += ['[1,0]<stdout>:' + x for x in lines]
    report.append(('efa-2node.log all_reduce', b[-1]))
    out += ['--------------------------------------------------------------------------',
            'mpirun noticed that the job completed; 16 processes exited with status 0',
            '--------------------------------------------------------------------------',
            '+ mpirun -np 16 -N 8 --tag-output -x FI_PROVIDER=efa /opt/nccl-tests/build/alltoall_perf -b 8 -e 8G -f 2 -g 1']
    lines, b = table('2.19', 'alltoall', ranks, 95.0, 31.5, rng, noise=noise)
    for i, x in enumerate(lines):
        if x.startswith('     2097152'):  # a collector wrapped this row at 80 columns
            out += ['[1,0]<stdout>:' + x[:80], '[1,0]<stdout>:' + x[80:]]
        else:
            out.append('[1,0]<stdout>:' + x)
    report.append(('efa-2node.log alltoall', b[-1]))
    write('efa-2node.log', out)
    # 4. v2.19 sendrecv, one rank on each of two IB nodes, -c 0 (#wrong N/A).
    lines, b = table('2.19', 'sendrecv', h100_ranks(['node-a01', 'node-b07'], 1, 7000), 8.9, 46.8, rng, na=True)
    write('sendrecv_perf-2node.txt', lines)
    report.append(('sendrecv_perf-2node.txt', b[-1]))
    # 5. v2.19 reduce_scatter with data corruption at 256 MiB.
    lines, b = table('2.19', 'reduce_scatter', h100_ranks(['dgx-h100-01'], 8, 8000), 12.0, 360.0, rng, wrong_at=256 << 20)
    write('reduce_scatter_perf-wrong.txt', lines)
    # 6. v2.19 all_gather on 2 nodes, killed after 512 MiB (no footer, last row cut).
    lines, b = table('2.19', 'all_gather', h100_ranks(['node-a01', 'node-a02'], 8, 9000), 30.0, 330.0, rng, cut_at=512 << 20)
    write('all_gather_perf-2node-cut.txt', lines)
    report.append(('all_gather_perf-2node-cut.txt', b[-1]))
    # 7. nccl-tests built without MPI under mpirun -np 2: two single-rank tests interleaved.
    a, _ = table('2.19', 'all_reduce', h100_ranks(['dgx-h100-01'], 1, 100), 5.0, 300.0, rng, maxb=1 << 20)
    c, _ = table('2.19', 'all_reduce', h100_ranks(['dgx-h100-01'], 1, 101), 5.0, 300.0, rng, maxb=1 << 20)
    write('all_reduce_perf-nompi.txt', [x for pair in zip(a, c) for x in pair])
    # 8. broadcast, which moefold does not price.
    lines, _ = table('2.19', 'broadcast', h100_ranks(['dgx-h100-01'], 8, 300), 10.0, 350.0, rng, maxb=64 << 20)
    write('broadcast_perf.txt', lines)
    # DeepEP: test_intranode.py on 8 H100 (NVLink4) and test_internode.py on 2 nodes.
    intra = ['[config] num_tokens=4096, hidden=7168, num_topk=8', '']
    for chunk in range(4, 33, 2):
        intra.append('[tuning] SMs 24, NVL chunk %d: %.2f GB/s (NVL), %.2f us' % (chunk, 300 + chunk, 1000.0))
    intra += ['[tuning] Best dispatch (FP8): SMs 24, NVL chunk 20, 351.20 GB/s (NVL), t: 520.33 us', '',
              '[tuning] Best dispatch (BF16): SMs 24, NVL chunk 24, 345.21 GB/s (NVL), t: 1012.41 us', '',
              '[tuning] Best combine: SMs 24, NVL chunk 6: 352.40 GB/s (NVL), t: 991.77 us', '']
    write('deepep-intranode.txt', intra)
    inter = ['[config] num_tokens=4096, hidden=7168, num_topk_groups=2, num_topk=8', '',
             '[tuning] Best dispatch (FP8): SMs 24, NVL chunk 16, RDMA chunk 16: 41 + 898 us, 44.10 GB/s (RDMA), 143.90 GB/s (NVL)', '',
             '[tuning] Best dispatch (BF16): SMs 24, NVL chunk 12, RDMA chunk 20: 42 + 1648 us, 43.20 GB/s (RDMA), 141.00 GB/s (NVL)', '',
             '[tuning] Best combine: SMs 24, NVL chunk 4, RDMA chunk 16, 40.11 + 1701.36 us, 41.90 GB/s (RDMA), 136.80 GB/s (NVL)', '']
    write('deepep-internode-2node.txt', inter)
    for name, (size, bus) in report:
        print('%-32s busbw %.2f GB/s at %d bytes' % (name, bus, size))


if __name__ == '__main__':
    main()
