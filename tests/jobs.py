"""Job programs the end-to-end tests submit (run with ``python -c``)."""

# A training loop that checkpoints every step and stops cleanly on SIGTERM.
# argv: steps, seconds per step. Appends "start/stop/end ATTEMPT TIME STEP"
# lines to $GPUHUB_CHECKPOINT_DIR/trace so tests can check attempts never
# overlap and that a requeued attempt resumed where the last one stopped.
CHECKPOINTING = r'''
import os, signal, sys, time
steps, step_s = int(sys.argv[1]), float(sys.argv[2])
ck = os.environ["GPUHUB_CHECKPOINT_DIR"]
os.makedirs(ck, exist_ok=True)
state = os.path.join(ck, "step")
done = int(open(state).read()) if os.path.exists(state) else 0
attempt = os.environ["GPUHUB_ATTEMPT"]
def trace(word):
    with open(os.path.join(ck, "trace"), "a") as f:
        f.write(f"{word} {attempt} {time.time()} {done}\n")
trace("start")
print(f"attempt {attempt} on GPUs [{os.environ['CUDA_VISIBLE_DEVICES']}] resumes at step {done}", flush=True)
stopping = False
def on_term(*_):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, on_term)
while done < steps and not stopping:
    time.sleep(step_s)
    done += 1
    with open(state + ".tmp", "w") as f:
        f.write(str(done))
    os.replace(state + ".tmp", state)
trace("stop" if stopping else "end")
print(f"{'checkpointed' if stopping else 'finished'} at step {done}", flush=True)
'''


def read_trace(path: str) -> list[tuple[str, int, float, int]]:
    out = []
    with open(path) as f:
        for line in f:
            word, attempt, t, step = line.split()
            out.append((word, int(attempt), float(t), int(step)))
    return out
