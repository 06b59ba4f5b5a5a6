// quant_blocks.glsl: one weight and one block scale of a matrix in llama.cpp's Q8_0 (Q8 defined) or
// Q4_0 blocks as kernels/src/quant.rs `split` lays them out, read from the uint words `wq[]` the
// including shader declares (llm_quant.glsl, llm_gemv_team.glsl and llm_linear.glsl with QUANT); and
// four values of one word as floats without a conversion (q8_word, q4_low, q4_high).

// Block b's scale, the matrix's scales at byte s_off.
float q_scale(uint s_off, uint b)
{
    const uint at = s_off + 2u * b;
    const uint word = wq[at >> 2];
    return unpackHalf2x16((at & 2u) != 0u ? word >> 16 : word).x;
}

// Weight i (0..31) of block b, unscaled, the matrix's values at byte v_off.
float q_value(uint v_off, uint b, uint i)
{
#ifdef Q8
    const uint at = v_off + b * 32u + i;
    // The byte, sign-extended: shifted to the top, then arithmetically down.
    return float(int(wq[at >> 2] << (24u - 8u * (at & 3u))) >> 24);
#else
    const uint at = v_off + b * 16u + (i & 15u);
    const uint byte = (wq[at >> 2] >> (8u * (at & 3u))) & 0xFFu;
    return float(int(i < 16u ? byte & 15u : byte >> 4) - 8);
#endif
}

// Weight e of the matrix (element e of its rows, counted from its start), scaled.
float q_weight(uint v_off, uint s_off, uint e)
{
    return q_value(v_off, e >> 5, e & 31u) * q_scale(s_off, e >> 5);
}

// Four values of a word with no conversion and no shift per value: a value v masked in place at bit p
// of the word or of its upper half (0 or 8; Q4_0's high nibbles 4 and 12) and ORed into the float
// 2^(23-p) (biased exponent 150 - p, an empty mantissa) is the float 2^(23-p) + v exactly, and
// subtracting 2^(23-p) + o (o the format's offset: 128 for Q8_0's bytes xor 0x80, 8 for Q4_0's
// nibbles) leaves v - o exactly. The exponents come in `e`, from q_magic(Q_MAGIC_BYTES) or
// q_magic(Q_MAGIC_HIGH): with the mask and the exponent both constants NVIDIA's compiler spends two
// LOP3 on `(v & m) | e` (bench/opencl_sass.py on its OpenCL twin), so q_magic makes the exponents
// values the compiler cannot know (ORed with the group count's top bit, zero), kept in registers.
#define Q_MAGIC_BYTES uvec4(0x4B000000u, 0x47000000u, 0x4B000000u, 0x47000000u)
#define Q_MAGIC_HIGH uvec4(0x49000000u, 0x45000000u, 0x49000000u, 0x45000000u)
#define Q_BASE_BYTES(o) vec4(8388608.0 + (o), 32768.0 + (o), 8388608.0 + (o), 32768.0 + (o))
#define Q_BASE_HIGH(o) vec4(524288.0 + (o), 2048.0 + (o), 524288.0 + (o), 2048.0 + (o))
uvec4 q_magic(uvec4 e)
{
    return e | uvec4(gl_NumWorkGroups.x >> 31);
}
#ifdef Q8
// Q8_0: the word's four bytes (weights 4t..4t+3 of its block); e = q_magic(Q_MAGIC_BYTES).
vec4 q8_word(uint w, uvec4 e)
{
    const uint v = w ^ 0x80808080u;
    const uvec4 m = uvec4(v, v, v >> 16, v >> 16) & uvec4(0xFFu, 0xFF00u, 0xFFu, 0xFF00u);
    return uintBitsToFloat(m | e) - Q_BASE_BYTES(128.0);
}
#else
// Q4_0: the low nibbles of the word's four bytes (weights 4t..4t+3 of its block); e =
// q_magic(Q_MAGIC_BYTES).
vec4 q4_low(uint w, uvec4 e)
{
    const uvec4 m = uvec4(w, w, w >> 16, w >> 16) & uvec4(0xFu, 0xF00u, 0xFu, 0xF00u);
    return uintBitsToFloat(m | e) - Q_BASE_BYTES(8.0);
}
// The high nibbles (weights 16+4t..16+4t+3); e = q_magic(Q_MAGIC_HIGH).
vec4 q4_high(uint w, uvec4 e)
{
    const uvec4 m = uvec4(w, w, w >> 16, w >> 16) & uvec4(0xF0u, 0xF000u, 0xF0u, 0xF000u);
    return uintBitsToFloat(m | e) - Q_BASE_HIGH(8.0);
}
#endif
