#!/usr/bin/env sh
# Fetch public real PyTorch-profiler (Kineto) traces, recorded by others, for the suite
# tests/realdata/test_public_traces.py (provenance: tests/realdata/public_traces.md).
# They are third-party files: never commit them.
#
#   sh tests/realdata/fetch_public_traces.sh [DEST]   # DEST defaults to ./.public-traces
#   GPUWISE_PUBLIC_TRACES=DEST .venv/bin/pytest -q tests/realdata/test_public_traces.py
#
# Each source is a blob-filtered clone (no file contents until asked for); each trace is
# read at its pinned commit and checked against its SHA-256. About 30 MB in all.
# GIT_BASE overrides https://github.com (a local mirror: GIT_BASE=file:///path/to/mirrors).
set -eu
DEST=${1:-.public-traces}
BASE=${GIT_BASE:-https://github.com}
mkdir -p "$DEST/.repos"

# fetch OWNER/NAME COMMIT PATH OUT SHA256
fetch() {
    repo=$DEST/.repos/$(echo "$1" | tr / +)
    if [ ! -d "$repo" ]; then
        git clone --quiet --filter=blob:none --no-checkout --bare "$BASE/$1" "$repo"
    fi
    mkdir -p "$(dirname "$DEST/$4")"
    git --git-dir="$repo" show "$2:$3" > "$DEST/$4.part"
    echo "$5  $DEST/$4.part" | sha256sum -c --quiet -
    mv "$DEST/$4.part" "$DEST/$4"
}

# hyukjlee/traceMap: vLLM serving benchmark traces (H100, MI300X)
TM=68b9e54dcce55792491cbd3689c81b03250e8cea
for f in 1_h100_1000isl_10osl_32con 1_mi300x_1000isl_10osl_32con; do
    case $f in
        1_h100*) sum=44c97799278d7486701977075d5e8b2cc7ed8da1fb148eb2516fda8cf375ba7d ;;
        *) sum=f51303be881bd50cc1f282eab748c1b8c6d6b2288464485e2702c64d4735e95f ;;
    esac
    fetch hyukjlee/traceMap $TM "trace_file/examples/$f.pt.trace.json.gz" \
        "tracemap/$f.pt.trace.json.gz" $sum
done

# AMD-AGI/TraceLens (MIT): serving engines, ROCm training, B200 tensor parallel
TL=171dd74721ca1ec45709e5805b68ae1f65e27811
while read -r sum path; do
    fetch AMD-AGI/TraceLens $TL "$path" "tracelens/$path" "$sum"
done <<'LIST'
7f5e9c9dc4ba71371fde1d947204134575b05d7a614986f249fa8142663c7ca2 tests/traces/b200/eager_trace.json.gz
7c4a4b817b79db0aa90f0df0368de88ac6f6e22261864b68fa88d0a3f9c5c63d tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz
c2d1d7fea329b45adf2d065875c817e02cbc19ed6c7d19eef3fd5e3364112e87 tests/traces/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz
959efc7b235d78c5a22ad94c689175a4f5a4c1592edd5e2df6dafdd9098d5a10 tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz
cddbdd83d4e6078430d6e5f94c520a00371abf299d25a726799fae665302a55d tests/traces/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz
e1c0549a6a9e4eebc83a5e4b9e9f83e52cb03197729c72ec8f2db8e786094b46 tests/traces/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz
6bafad1e64aa49e71793cb45fb3ab84fa93f9f018c51b18a86508e7ea6de350e tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz
ca3c1a8452be14f8e41aaaf3c80d2c0502ce97d365e2c74bc21a95fb9585fde8 tests/traces/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz
1324913759fbb1a80c9b9b7bb6fb2c8c3e8cbf0443af4d9a5abf03c94ae82961 tests/traces/inference/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz
da0a9ffe51da7b5cc0ece37be5708c4c002a2f89e2839bd2bad00ab8d7e6f8c5 tests/traces/inference/vllm_decode_full/graph_execution.json.gz
86e9df6ffa16c973ec94ab256b35ed1c66c1dd7a7b0c61938cd45fc0add7f36c tests/traces/inference/vllm_prefilldecode_piecewise/capture_traces/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz
4eff6c90583855d67a12a06aa5edfd281a745bba4be4462a41bd4cacf6dea702 tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz
26dfc6b2ca8aeaec12ed05956685b9b58f8ca9b880a813a0dc33cc0ceb13e3d1 tests/traces/inference/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz
27e093d746edcc776524b4fa09ba20381e2dbc04767ef0dbd97fd670c3b03920 tests/traces/inference/xdit_sd_3.5/profile_trace_rank_0.json.gz
0c9c627bcefe7365e6595ff9f86594e07553820db6a268c09c369e25fe47b97a tests/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz
1bfbe813843070fcf629db2d67afbcabafe4e0a61bd1d30157b58a171f0664ac tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz
32f123ef8a3d14c8352b43bd540fe42b4a9e07225700af5e261e29b4de9e6f8c tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz
0a6a7dfe1f0bf16c74876ebabffbac57b350d8897c4ad42c3dcf6d1dab2aa2aa tests/traces/mi300/resnet_act_checkpoint.json.gz
fe026809aa6cb13e3dcec85bca3c3a955da52284de49178675499b452874190e tests/traces/torch_compile_triton/trace.json.gz
LIST
# removed from TraceLens' main line later: read at the commit that added it
fetch AMD-AGI/TraceLens 13730e84e1ee04c1e272d23b60e792492f1a39c8 \
    tests/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz \
    tracelens/tests/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz \
    0e9ad539e9d802f76f88c88c4780ad76489626382707d91b7dfcf19c364764b7

echo "GPUWISE_PUBLIC_TRACES=$(cd "$DEST" && pwd)"
