// quant_blocks.glsl: one weight and one block scale of a matrix in llama.cpp's Q8_0 (Q8 defined) or
// Q4_0 blocks as kernels/src/quant.rs `split` lays them out, read from the uint words `wq[]` the
// including shader declares (llm_quant.glsl, llm_gemv_team.glsl with QUANT).

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
