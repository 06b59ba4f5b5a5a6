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

// Four values of a word with no conversion and no shift per value: a value masked in place, at bit p
// (0, 4, 8 or 12) of the word or of its upper half, ORed into the mantissa of 2^23 is 2^23 + v·2^p
// exactly, and subtracting 2^23 + o·2^p (o the format's offset: 128 for Q8_0's bytes xor 0x80, 8 for
// Q4_0's nibbles) leaves (v - o)·2^p exactly: values times Q_SCALE_BYTES (p = 0, 8, 0, 8) or
// Q_SCALE_HIGH (p = 4, 12, 4, 12), powers of two, are the values (exact).
#define Q_MANT 0x4B000000u
#define Q_P0 8388608.0
#define Q_SCALE_BYTES vec4(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0)
#define Q_SCALE_HIGH vec4(1.0 / 16.0, 1.0 / 4096.0, 1.0 / 16.0, 1.0 / 4096.0)
#ifdef Q8
// Q8_0: the word's four bytes (weights 4t..4t+3 of its block), times 2^p.
vec4 q8_word(uint w)
{
    const uint v = w ^ 0x80808080u;
    const uvec4 m = uvec4(v, v, v >> 16, v >> 16) & uvec4(0xFFu, 0xFF00u, 0xFFu, 0xFF00u);
    return uintBitsToFloat(m | Q_MANT) - vec4(Q_P0 + 128.0, Q_P0 + 32768.0, Q_P0 + 128.0, Q_P0 + 32768.0);
}
#else
// Q4_0: the low nibbles of the word's four bytes (weights 4t..4t+3 of its block), times 2^p.
vec4 q4_low(uint w)
{
    const uvec4 m = uvec4(w, w, w >> 16, w >> 16) & uvec4(0xFu, 0xF00u, 0xFu, 0xF00u);
    return uintBitsToFloat(m | Q_MANT) - vec4(Q_P0 + 8.0, Q_P0 + 2048.0, Q_P0 + 8.0, Q_P0 + 2048.0);
}
// The high nibbles (weights 16+4t..16+4t+3), times 2^p.
vec4 q4_high(uint w)
{
    const uvec4 m = uvec4(w, w, w >> 16, w >> 16) & uvec4(0xF0u, 0xF000u, 0xF0u, 0xF000u);
    return uintBitsToFloat(m | Q_MANT) - vec4(Q_P0 + 128.0, Q_P0 + 32768.0, Q_P0 + 128.0, Q_P0 + 32768.0);
}
#endif
