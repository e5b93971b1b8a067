#!/usr/bin/env python3
"""Writes the Megatron-LM training logs in this folder (committed; CI never runs this script).

Each log follows the printing code of one Megatron-LM version, looked up in its source:
  - the arguments dump: megatron/(training/)arguments.py _print_args
    ('------------------------ arguments ------------------------', then
    '  {} {} {}'.format(name, '.' * (48 - len(name)), value) sorted case-insensitively,
    '-------------------- end of arguments ---------------------');
  - the iteration line: megatron/(training/)training.py training_log (fields and formats per
    version: 23.06 has no timestamp and no TFLOP/s field, learning rate {:.3E}; core_v0.12.0 a
    [%Y-%m-%d %H:%M:%S] stamp and 'throughput per GPU (TFLOP/s/GPU): {:.1f}' with
    --log-throughput; main (2026) a microsecond stamp and logs the first iteration too);
  - the memory report: utils.report_memory ('[Rank r] (after N iterations) memory (MB) |
    allocated: .. | max allocated: .. | reserved: .. | max reserved: ..', unrounded floats before
    core_v0.13, {:.2f} in main).
The argument names and defaults of the dump are those of the version's arguments.py (read with
Python's ast from a Megatron-LM checkout: pass its path), with the run's own flags on top and the
attributes validate_args derives (world_size, data_parallel_size, ...). The noise real job output
carries is added on purpose: launcher prefixes, NCCL INFO/WARN lines (also inside the dump),
other ranks' lines, a line cut short, skipped iterations, a batch-size ramp-up.

  python3 gen_logs.py /path/to/Megatron-LM     (a git checkout with tags 23.06, core_v0.12.0,
                                                core_v0.14.0)
It prints the steady-state median each log must give (the tests assert those numbers).
"""
import ast
import random
import statistics
import subprocess
import sys
from datetime import datetime, timedelta

HERE = __file__.rsplit('/', 1)[0] or '.'


def defaults(repo, tag):
    """(dest -> default) of every add_argument in the tag's arguments.py."""
    for path in ('megatron/training/arguments.py', 'megatron/arguments.py'):
        try:
            src = subprocess.run(['git', '-C', repo, 'show', f'{tag}:{path}'], check=True,
                                 capture_output=True, text=True).stdout
            break
        except subprocess.CalledProcessError:
            continue
    out = {}
    for node in ast.walk(ast.parse(src)):
        if not (isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'add_argument'):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and
                 isinstance(a.value, str) and a.value.startswith('--')]
        if not flags:
            continue
        kw = {k.arg: k.value for k in node.keywords}
        dest = kw['dest'].value if 'dest' in kw and isinstance(kw['dest'], ast.Constant) \
            else flags[0][2:].replace('-', '_')
        action = kw['action'].value if 'action' in kw and isinstance(kw['action'], ast.Constant) \
            else None
        if action == 'store_true':
            val = False
        elif action == 'store_false':
            val = True
        elif 'default' in kw:
            try:
                val = ast.literal_eval(kw['default'])
            except ValueError:
                val = None
        else:
            val = None
        out.setdefault(dest, val)
    return out


def dump(args):
    lines = ['------------------------ arguments ------------------------']
    rows = []
    for arg in args:
        dots = '.' * (48 - len(arg))
        rows.append('  {} {} {}'.format(arg, dots, args[arg]))
    lines += sorted(rows, key=lambda x: x.lower())
    lines.append('-------------------- end of arguments ---------------------')
    return lines


def nccl_noise(rng, host, n):
    msgs = ['NCCL INFO Channel 00/24 :    0   1   2   3   4   5   6   7',
            'NCCL INFO Connected all rings',
            'NCCL INFO Using network IB',
            'NCCL INFO comm 0x5581c2a0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId '
            '0x9a3f1e2b4c5d6e7f - Init COMPLETE',
            'NCCL WARN NET/IB : Got async event : port error',
            'NCCL INFO NVLS multicast support is available on dev 0']
    pid = rng.randint(1000, 99999)
    return [f'{host}:{pid}:{pid + 7} [{rng.randint(0, 7)}] {rng.choice(msgs)}' for _ in range(n)]


def megatron_flops(a, batch, vocab):
    """Megatron's num_floating_point_operations (core_v0.12.0 training.py, transformer_flops) for
    a GQA/MHA model with dense or MoE MLPs: what its TFLOP/s field divides by the step time."""
    heads, h, L, s = a['num_attention_heads'], a['hidden_size'], a['num_layers'], a['seq_length']
    groups = a['num_query_groups'] if a.get('group_query_attention') else heads
    qratio = a['kv_channels'] * heads / h
    if a.get('num_experts') is None:
        dense, moe, topk = L, 0, 0
    else:
        dense, moe, topk = 0, L, a['moe_router_topk']
    moe_ffn = a.get('moe_ffn_hidden_size') or a['ffn_hidden_size']
    glu = 3 / 2 if a.get('swiglu') else 1
    mult = a['make_vocab_size_divisible_by'] * a['tensor_model_parallel_size']
    padded = -(-vocab // mult) * mult
    attn = 12 * L * h * h * ((1 + groups / heads + s / h / 2) * qratio)
    return batch * s * (12 * L * h * (a['ffn_hidden_size'] * glu * dense / L +
                                      moe_ffn * topk * glu * moe / L) +
                        attn + 6 * h * padded)


def steady(lines_ms, keep):
    return statistics.median([ms for ms, k in zip(lines_ms, keep) if k])


# ---------------------------------------------------------------------------------------------
# 1. Megatron-LM 23.06: a dense 7B GPT (Llama-2 shape), fp16, 16 x H100, TP2 PP2 DP4,
#    log_interval 1, no timestamps, no TFLOP/s field; nvidia-smi -L at the top; a skipped
#    iteration (fp16 loss scale); the job killed mid-line at the end.
def log_2306(repo):
    rng = random.Random(2306)
    a = defaults(repo, '23.06')
    run = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=11008, num_attention_heads=32,
               seq_length=4096, max_position_embeddings=4096, micro_batch_size=1,
               global_batch_size=64, tensor_model_parallel_size=2,
               pipeline_model_parallel_size=2, sequence_parallel=True,
               use_distributed_optimizer=True, swiglu=True,
               untie_embeddings_and_output_weights=True, normalization='RMSNorm',
               position_embedding_type='rope', add_bias_linear=False, fp16=True,
               lr=0.0003, min_lr=3e-05, lr_decay_style='cosine', train_iters=40,
               log_interval=1, eval_interval=1000, eval_iters=10, tokenizer_type='Llama2Tokenizer',
               tokenizer_model='/data/llama2/tokenizer.model', data_path=['/data/pile/pile_text_document'],
               split='99,1,0', save_interval=10000, clip_grad=1.0, weight_decay=0.1,
               adam_beta2=0.95, init_method_std=0.02, use_flash_attn=True,
               make_vocab_size_divisible_by=128, seed=1234)
    a.update(run)
    a.update(world_size=16, rank=0, data_parallel_size=4, virtual_pipeline_model_parallel_size=None,
             params_dtype='torch.float16', consumed_train_samples=0, consumed_valid_samples=0,
             kv_channels=128, encoder_seq_length=4096, encoder_num_layers=32,
             transformer_pipeline_model_parallel_size=2)
    out = ['GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d1a8e2c-7f3b-4e91-9a60-0c1e4b2d8f71)',
           'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-8b3c1f0e-2a4d-4c6b-8e1f-3d5a7c9b0e12)',
           'using world size: 16, data-parallel-size: 4, tensor-model-parallel size: 2, '
           'pipeline-model-parallel size: 2 ',
           'using torch.float16 for parameters ...']
    d = dump(a)
    d.insert(57, nccl_noise(rng, 'node-017', 1)[0])  # another rank's line inside the dump
    out += d
    out += ['setting number of micro-batches to constant 16',
            '> building Llama2Tokenizer tokenizer ...',
            ' > padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)',
            '> initializing torch distributed ...']
    out += nccl_noise(rng, 'node-017', 6)
    out += ['[after dataloaders are built] datetime: 2023-08-14 09:12:40 ',
            'done with setup ...', 'training ...', '[before the start of training step] datetime: '
            '2023-08-14 09:12:41 ']
    ms, keep = [], []
    for it in range(1, 41):
        t = {1: 21562.7, 2: 4810.4, 3: 2620.9}.get(it, round(rng.gauss(2371.0, 9.0), 1))
        skipped = 1 if it == 17 else 0
        line = (' iteration {:8d}/{:8d} |'.format(it, 40) +
                ' consumed samples: {:12d} |'.format(it * 64) +
                ' elapsed time per iteration (ms): {:.1f} |'.format(t) +
                ' learning rate: {:.3E} |'.format(3e-4 * min(1.0, it / 10)) +
                ' global batch size: {:5d} |'.format(64))
        if not skipped:
            line += ' lm loss: {:.6E} |'.format(10.9 - 0.1 * it)
        line += ' loss scale: {:.1f} |'.format(65536.0 if it < 17 else 32768.0)
        line += ' grad norm: {:.3f} |'.format(rng.uniform(1, 4)) if not skipped else ''
        line += ' number of skipped iterations: {:3d} |'.format(skipped)
        line += ' number of nan iterations: {:3d} |'.format(0)
        if it == 40:
            line = line[:97]  # the job was killed while printing
        out.append(line)
        if it < 40:
            ms.append(t)
            keep.append(it > 3 and not skipped)
        if it == 1:
            mb = 1024.0 * 1024.0
            for rank, (al, mal, res, mres) in zip((0, 1, 8, 9), (
                    (9021.3 * mb, 26874.9 * mb, 28302.0 * mb, 28302.0 * mb),
                    (9021.3 * mb, 26874.9 * mb, 28298.0 * mb, 28298.0 * mb),
                    (8188.6 * mb, 24021.2 * mb, 25250.0 * mb, 25250.0 * mb),
                    (8188.6 * mb, 24021.2 * mb, 25246.0 * mb, 25246.0 * mb))):
                out.append('[Rank {}] {}'.format(rank, '(after 1 iterations) memory (MB)' +
                           ' | allocated: {}'.format(al / mb) + ' | max allocated: {}'.format(mal / mb) +
                           ' | reserved: {}'.format(res / mb) + ' | max reserved: {}'.format(mres / mb)))
            out += ['(min, max) time across ranks (ms):',
                    '    {}: ({:.2f}, {:.2f})'.format(('forward-backward' + ' ').ljust(48, '.'), 21120.5, 21122.8),
                    '    {}: ({:.2f}, {:.2f})'.format(('optimizer' + ' ').ljust(48, '.'), 402.3, 402.9)]
        if it % 9 == 0:
            out += nccl_noise(rng, 'node-018', 1)
    with open(f'{HERE}/megatron-23.06-dense.log', 'w') as f:
        f.write('\n'.join(out))  # no final newline: cut short
    return steady(ms, keep), sum(keep)


# ---------------------------------------------------------------------------------------------
# 2. core_v0.12.0: Mixtral-8x7B shape on 64 H100 (8 nodes), TP2 PP4 VPP2 EP8, log_interval 10,
#    --log-throughput, a batch-size ramp-up; every line prefixed by `srun --label`; nvidia-smi's
#    table at the top; NCCL lines from other ranks between and inside.
def log_v012(repo):
    rng = random.Random(12)
    a = defaults(repo, 'core_v0.12.0')
    run = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
               group_query_attention=True, num_query_groups=8, seq_length=4096,
               max_position_embeddings=32768, micro_batch_size=1, global_batch_size=256,
               rampup_batch_size=['64', '64', '7680'], tensor_model_parallel_size=2,
               pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=4,
               expert_model_parallel_size=8, sequence_parallel=True, use_distributed_optimizer=True,
               overlap_grad_reduce=True, overlap_param_gather=True, num_experts=8,
               moe_router_topk=2, moe_grouped_gemm=True, moe_token_dispatcher_type='alltoall',
               moe_router_load_balancing_type='aux_loss', moe_aux_loss_coeff=0.01,
               moe_layer_freq=1, swiglu=True, untie_embeddings_and_output_weights=True,
               normalization='RMSNorm', position_embedding_type='rope', rotary_base=1000000,
               add_bias_linear=False, bf16=True, attention_backend='AttnBackend.auto',
               lr=0.0001, min_lr=1e-05, lr_decay_style='cosine', train_iters=200, log_interval=10,
               log_throughput=True, eval_interval=1000, eval_iters=0,
               tokenizer_type='HuggingFaceTokenizer', tokenizer_model='mistralai/Mixtral-8x7B-v0.1',
               data_path=['/lustre/data/mixtral/text_document'], split='99,1,0',
               save_interval=10000, clip_grad=1.0, weight_decay=0.1, adam_beta2=0.95,
               init_method_std=0.01, make_vocab_size_divisible_by=128, seed=42,
               transformer_impl='transformer_engine', manual_gc=True, manual_gc_interval=10)
    a.update(run)
    a.update(world_size=64, rank=0, data_parallel_size=8, virtual_pipeline_model_parallel_size=2,
             params_dtype='torch.bfloat16', consumed_train_samples=0, kv_channels=128,
             moe_ffn_hidden_size=14336, expert_tensor_parallel_size=2, encoder_seq_length=4096,
             encoder_num_layers=32, main_grads_dtype='torch.float32',
             main_params_dtype='torch.float32', exp_avg_dtype='torch.float32',
             exp_avg_sq_dtype='torch.float32', transformer_pipeline_model_parallel_size=4,
             variable_seq_lengths=False, overlap_p2p_comm=True)

    def lab(rank, s):
        return f'{rank:>2}: {s}'  # srun --label pads the task number to the widest one
    out = [lab(0, '+-----------------------------------------------------------------------------------------+'),
           lab(0, '| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |'),
           lab(0, '|-----------------------------------------+------------------------+----------------------+'),
           lab(0, '| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |'),
           lab(0, '|=========================================+========================+======================|'),
           lab(0, '|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |'),
           lab(0, '|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |'),
           lab(0, 'using world size: 64, data-parallel size: 8, context-parallel size: 1, '
                  'hierarchical context-parallel sizes: Nonetensor-model-parallel size: 2, '
                  'encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: 4, '
                  'encoder-pipeline-model-parallel size: 0'),
           lab(0, 'using torch.bfloat16 for parameters ...')]
    d = [lab(0, x) for x in dump(a)]
    noise = nccl_noise(rng, 'dgx-h100-07', 3)
    for k, n in zip((40, 212, 377), noise):
        d.insert(k, lab(rng.randint(1, 63), n))
    out += d
    out += [lab(0, '> building HuggingFaceTokenizer tokenizer ...'),
            lab(0, ' > padded vocab (size: 32000) with 256 dummy tokens (new size: 32256)')]
    out += [lab(rng.randint(1, 63), n) for n in nccl_noise(rng, 'dgx-h100-02', 8)]
    out += [lab(0, '[after dataloaders are built] datetime: 2025-05-20 11:02:31 '),
            lab(0, 'training ...')]
    ms, keep = [], []
    t0 = datetime(2025, 5, 20, 11, 2, 40)
    samples = 0
    for it in range(10, 201, 10):
        gbs = 64 if it <= 10 else 128 if it <= 20 else 192 if it <= 30 else 256
        base = 3652.0 * gbs / 256
        t = round(rng.gauss(base, 8.0), 1) if it > 10 else 9120.6
        samples += gbs * 10
        flops = megatron_flops(a, gbs, 32000) / (t / 1000 * 1e12 * 64)
        t0 += timedelta(milliseconds=t * 10)
        line = (f" [{t0.strftime('%Y-%m-%d %H:%M:%S')}]" +
                ' iteration {:8d}/{:8d} |'.format(it, 200) +
                ' consumed samples: {:12d} |'.format(samples) +
                ' elapsed time per iteration (ms): {:.1f} |'.format(t) +
                f' throughput per GPU (TFLOP/s/GPU): {flops:.1f} |' +
                f' learning rate: {1e-4 * min(1, it / 50):.6E} |' +
                f' global batch size: {gbs:5d} |' +
                ' lm loss: {:.6E} |'.format(9.0 - it / 40) +
                ' load_balancing_loss: {:.6E} |'.format(1.02 + rng.uniform(0, 0.02)) +
                f' loss scale: {1.0:.1f} |' + f' grad norm: {rng.uniform(0.5, 2):.3f} |' +
                ' number of skipped iterations: {:3d} |'.format(0) +
                ' number of nan iterations: {:3d} |'.format(0))
        out.append(lab(63, line))
        ms.append(t)
        keep.append(it > 10 and gbs == 256)
        if it == 10:
            mb = 1024.0 * 1024.0
            for rank, mres in ((0, 44410.0), (1, 44402.0), (16, 41204.0), (17, 41210.0),
                               (32, 39990.0), (33, 39994.0), (48, 38488.0), (49, 38480.0)):
                s = ('(after 10 iterations) memory (MB)' +
                     ' | allocated: {}'.format(21840.318359375) +
                     ' | max allocated: {}'.format(mres - 6011.53125) +
                     ' | reserved: {}'.format(mres) + ' | max reserved: {}'.format(mres))
                out.append(lab(rank, '[Rank {}] {}'.format(rank, s)))
        if it % 50 == 0:
            out.append(lab(rng.randint(0, 62), nccl_noise(rng, 'dgx-h100-05', 1)[0]))
    with open(f'{HERE}/megatron-core_v0.12.0-mixtral.log', 'w') as f:
        f.write('\n'.join(out) + '\n')
    return steady(ms, keep), sum(keep)


# ---------------------------------------------------------------------------------------------
# 3. main (2026): Qwen3-30B-A3B shape on 16 B200, PP2 with a layout string (VPP2), EP8, MXFP8,
#    DeepEP (flex), log_interval 1 with the first iteration logged; every line carries kubectl's
#    RFC 3339 timestamp and torchrun's [defaultN]: prefix; the job was resumed from iteration 30
#    (a second, identical arguments dump); a NaN iteration.
def log_main(repo):
    rng = random.Random(2026)
    # main builds part of its arguments from dataclasses (ArgumentGroupFactory), which this script
    # cannot read: the dump holds the union of core_v0.14.0's and main's add_argument names, less
    # cuda_graph_scope (main deletes the deprecated attribute before printing).
    a = defaults(repo, 'core_v0.14.0')
    a.update(defaults(repo, 'HEAD'))
    a.pop('cuda_graph_scope', None)
    a.pop('cuda_graph_scope_deprecated', None)
    run = dict(num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32,
               group_query_attention=True, num_query_groups=4, kv_channels=128, qk_layernorm=True,
               seq_length=4096, max_position_embeddings=40960, micro_batch_size=1,
               global_batch_size=256, tensor_model_parallel_size=1, pipeline_model_parallel_size=2,
               pipeline_model_parallel_layout='Et*12|t*12|t*12|t*12L',
               expert_model_parallel_size=8, use_distributed_optimizer=True,
               overlap_grad_reduce=True, overlap_param_gather=True, num_experts=128,
               moe_router_topk=8, moe_ffn_hidden_size=768, moe_grouped_gemm=True,
               moe_token_dispatcher_type='flex', moe_flex_dispatcher_backend='deepep',
               moe_router_load_balancing_type='aux_loss', moe_aux_loss_coeff=0.001,
               moe_router_dtype='fp32', moe_permute_fusion=True, moe_layer_freq=1, swiglu=True,
               untie_embeddings_and_output_weights=True, normalization='RMSNorm',
               position_embedding_type='rope', rotary_base=1000000, add_bias_linear=False,
               bf16=True, fp8='e4m3', fp8_recipe='mxfp8', fp8_param_gather=True,
               recompute_granularity='selective', recompute_modules=['moe_act', 'layernorm'],
               cuda_graph_impl='transformer_engine', cuda_graph_modules=['<CudaGraphModule.attn: 1>'],
               lr=0.0003, min_lr=3e-05, train_iters=60, log_interval=1, log_throughput=True,
               eval_interval=1000, eval_iters=0, tokenizer_type='HuggingFaceTokenizer',
               tokenizer_model='Qwen/Qwen3-30B-A3B', data_path=['/data/qwen3/text_document'],
               save_interval=30, save='/ckpt/qwen3-30b', load='/ckpt/qwen3-30b', clip_grad=1.0,
               weight_decay=0.1, adam_beta2=0.95, seed=1234,
               # Not a Megatron-LM argument: stands for one a fork or a newer version adds, which
               # the reader must list (its name says MoE) without refusing the log.
               moe_router_fusion_alpha=0.5)
    a.update(run)
    a.update(world_size=16, rank=0, data_parallel_size=8, virtual_pipeline_model_parallel_size=2,
             params_dtype='torch.bfloat16', consumed_train_samples=0,
             expert_tensor_parallel_size=1, main_grads_dtype='torch.float32',
             main_params_dtype='torch.float32', exp_avg_dtype='torch.float32',
             exp_avg_sq_dtype='torch.float32', transformer_pipeline_model_parallel_size=2)
    a['cuda_graph_modules'] = '[<CudaGraphModule.attn: 1>]'
    clock = [datetime(2026, 3, 2, 10, 11, 12, 345678)]

    def k8s(rank, s):
        clock[0] += timedelta(microseconds=rng.randint(50, 900))
        return clock[0].strftime('%Y-%m-%dT%H:%M:%S.%f') + '123Z ' + f'[default{rank}]:' + s
    out = []
    ms, keep = [], []
    for start in (0, 30):
        out.append(k8s(0, 'GPU 0: NVIDIA B200 (UUID: GPU-1f2e3d4c-5b6a-7988-a1b2-c3d4e5f60718)'))
        out.append(k8s(0, 'using world size: 16, data-parallel size: 8, context-parallel size: 1, '
                          'hierarchical context-parallel sizes: None, tensor-model-parallel size: 1, '
                          'pipeline-model-parallel size: 2'))
        d = dump(a)
        for i, x in enumerate(d):
            out.append(k8s(0, x))
            if i in (100, 333):
                out.append(k8s(rng.randint(1, 15), nccl_noise(rng, 'b200-node-1', 1)[0]))
        out.append(k8s(0, 'INFO:megatron.core.tokenizers.utils.build_tokenizer: > padded vocab '
                          '(size: 151643) with 229 dummy tokens (new size: 151872)'))
        if start:
            out.append(k8s(0, ' loading distributed checkpoint from /ckpt/qwen3-30b at iteration 30'))
        for it in range(start + 1, start + 31):
            if start == 0 and it > 28:
                break
            t = {start + 1: 24210.2, start + 2: 9308.4, start + 3: 8731.0}.get(
                it, round(rng.gauss(7560.0, 28.0), 1))
            nan = 1 if it == 44 else 0
            stamp = datetime(2026, 3, 2, 10, 20, 0) + timedelta(seconds=it * 2.5)
            line = (f" [{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')}]" +
                    ' iteration {:8d}/{:8d} |'.format(it, 60) +
                    ' consumed samples: {:12d} |'.format(it * 256) +
                    ' elapsed time per iteration (ms): {:.1f} |'.format(t) +
                    f' throughput per GPU (TFLOP/s/GPU): {megatron_flops(a, 256, 151643) / (t / 1e3 * 1e12 * 16):.1f} |' +
                    f' learning rate: {3e-4:.6E} |' + f' global batch size: {256:5d} |' +
                    (' lm loss: {:.6E} |'.format(3.1 - it / 100) if not nan else '') +
                    ' load_balancing_loss: {:.6E} |'.format(1.001) +
                    f' loss scale: {1.0:.1f} |' + f' grad norm: {rng.uniform(0.2, 0.4):.3f} |' +
                    ' number of skipped iterations: {:3d} |'.format(0) +
                    ' number of nan iterations: {:3d} |'.format(nan))
            out.append(k8s(15, line))
            ms.append(t)
            keep.append(it > start + 3 and not nan)
            if it == start + 1 or it == start + 2:
                out.append(k8s(0, 'Theoretical memory footprints: weight and optimizer=9120.44 MB, '
                                  'activation=41850.31 MB, total=50970.75 MB\n'.rstrip('\n')))
                for rank, mres in ((0, 64712.0), (8, 61930.0)):
                    s = (f'(after {it} iterations) memory (MB)' +
                         f' | allocated: {30120.55:.2f}' + f' | max allocated: {mres - 4096.5:.2f}' +
                         f' | reserved: {mres:.2f}' + f' | max reserved: {mres:.2f}')
                    out.append(k8s(rank, '[Rank {}] {}'.format(rank, s)))
    with open(f'{HERE}/megatron-main-2026-qwen3.log', 'w') as f:
        f.write('\n'.join(out) + '\n')
    return steady(ms, keep), sum(keep)


if __name__ == '__main__':
    repo = sys.argv[1]
    for name, fn in (('23.06', log_2306), ('core_v0.12.0', log_v012), ('main', log_main)):
        med, n = fn(repo)
        print(f'{name}: steady-state median {med:.1f} ms over {n} lines')
