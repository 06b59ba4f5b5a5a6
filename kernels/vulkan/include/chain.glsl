// chain.glsl: a dependent launch made of counters, for the decode shaders that have a `_chain` twin
// (agent/src/backend/vulkan/kernel/chain.rs records them; GPUFLEET_DEBUG_VULKAN_CHAIN).
//
// Two dispatches in a row with no barrier between them may run at once. With CHAIN defined, each
// group of a dispatch first waits until every group of the dispatch before it (`chain_count` of
// them) has bumped counter `chain_wait`, and bumps its own counter `chain_signal` when its stores
// are done; the host then leaves the barrier out. What a barrier costs a dispatch (the drain of the
// one before, the launch and ramp of the next) becomes groups already resident and waiting.
//
// Visibility is the classic one (threadfence, barrier, atomic): a group's invocations make their
// stores visible (memoryBarrierBuffer on `coherent` buffers) and meet at a barrier before one of
// them bumps the counter; a waiting group's first invocation reads the counter (coherent, in L2),
// and its reads of what the dispatch before wrote go through `coherent` bindings (CHAIN_COHERENT),
// never a stale L1 line. Counters count up from zero (the host fills them once a submission, one
// counter a dispatch). Counter 0 is the error word: a wait that has read its counter CHAIN_ROUNDS ·
// CHAIN_SPINS times (about four million) gives up and sets it, and the host reports an error, so a
// driver that launched a group before all of its producer's had started could not hang the GPU.
//
// A shader defines CHAIN_BINDING (the binding after its own) and ends its push-constant block with
// CHAIN_PUSH (three words at bytes 116..127: the host pads the block to them), calls CHAIN_WAIT()
// first in main and CHAIN_DONE() last, both in uniform control flow. Without CHAIN they are nothing.

#ifdef CHAIN
#define CHAIN_COHERENT coherent
#define CHAIN_PUSH layout(offset = 116) uint chain_wait; uint chain_count; uint chain_signal;

layout(set = 0, binding = CHAIN_BINDING, std430) coherent buffer Chain { uint chain[]; };

const uint CHAIN_NONE = 0xffffffffu;
const uint CHAIN_SPINS = 1u << 15;
const uint CHAIN_ROUNDS = 128u;

void chain_wait_for(uint slot, uint count)
{
    if (slot == CHAIN_NONE)
        return;
    if (gl_LocalInvocationIndex == 0u) {
        // Rounds of spins, each loop short: a compiler may cap a loop's trips (llvmpipe leaves a
        // loop after 65,535), so the outcome is asked again, not counted. Plain (coherent) loads,
        // not atomics: thousands of groups asking for one word by
        // read-modify-writes would queue at its L2 slice, the producer's bumps among them. Between
        // loads a short back-off of dependent arithmetic (its result is never true) keeps the
        // asking rate down.
        float t = 1.0;
        for (uint round = 0u; round < CHAIN_ROUNDS && chain[slot] < count; ++round) {
            for (uint spin = 0u; spin < CHAIN_SPINS && chain[slot] < count; ++spin) {
                for (uint b = 0u; b < 16u; ++b)
                    t = fma(t, 0.999, 0.001);
            }
        }
        if (chain[slot] < count || t < 0.0)
            atomicOr(chain[0], 1u);
    }
    memoryBarrierBuffer();
    barrier();
}

void chain_done(uint slot)
{
    if (slot == CHAIN_NONE)
        return;
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0u)
        atomicAdd(chain[slot], 1u);
}

#define CHAIN_WAIT() chain_wait_for(pc.chain_wait, pc.chain_count)
#define CHAIN_DONE() chain_done(pc.chain_signal)
#else
#define CHAIN_COHERENT
#define CHAIN_PUSH
#define CHAIN_WAIT()
#define CHAIN_DONE()
#endif
