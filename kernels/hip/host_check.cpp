// host_check.cpp: runs kernels/hip on the CPU to check their indexing, barriers and arithmetic
// against f64 references without a GPU. Each work-item is a std::thread, a block's threads share
// a std::barrier (s_barrier) and GF_SHARED becomes `static` (blocks run one at a time), the
// amdgcn id builtins read thread-locals and the dispatch packet is a struct. Build and run with
// check_host.sh; exits 1 when any kernel is out of tolerance.
#include <barrier>
#include <thread>
#include <vector>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <functional>
#include <string>
struct Packet { uint16_t header, setup, wx, wy, wz, res; uint32_t gx, gy, gz; };
static thread_local int t_x, t_y, t_z; static int g_x, g_y, g_z; static Packet pkt; static std::barrier<>* bar;
#define __builtin_amdgcn_workitem_id_x() t_x
#define __builtin_amdgcn_workitem_id_y() t_y
#define __builtin_amdgcn_workitem_id_z() t_z
#define __builtin_amdgcn_workgroup_id_x() g_x
#define __builtin_amdgcn_workgroup_id_y() g_y
#define __builtin_amdgcn_workgroup_id_z() g_z
#define __builtin_amdgcn_dispatch_ptr() ((const void*)&pkt)
#define __builtin_amdgcn_fence(a, b) ((void)0)
#define __builtin_amdgcn_s_barrier() bar->arrive_and_wait()
#define GF_KERNEL(block) extern "C"
#define GF_SHARED static
#include "gpufleet.hip"
template <typename F> void launch(F f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  pkt.wx = bx; pkt.wy = by; pkt.wz = bz; pkt.gx = gx * bx; pkt.gy = gy * by; pkt.gz = gz * bz;
  for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
    g_x = x; g_y = y; g_z = z; std::barrier<> b(bx * by * bz); bar = &b; std::vector<std::thread> ts;
    for (unsigned k = 0; k < bz; ++k) for (unsigned j = 0; j < by; ++j) for (unsigned i = 0; i < bx; ++i)
      ts.emplace_back([&, i, j, k] { t_x = i; t_y = j; t_z = k; f(); });
    for (auto& t : ts) t.join();
  }
}
static std::mt19937 rng(1);
std::vector<float> rnd(size_t n) { std::vector<float> v(n); std::uniform_real_distribution<float> d(-2, 2); for (auto& x : v) x = std::round(d(rng) * 256) / 256; return v; }
static int failures = 0;
static void report(const char* what, double err, double tol) {
  bool ok = err <= tol; if (!ok) ++failures;
  printf("%-48s max rel err %.3g (tol %.0e) %s\n", what, err, tol, ok ? "ok" : "FAIL");
}
// Largest |a - b| / (1 + |b|); with `half_store` (a half output) |a - b| is allowed the rounding of the store first,
// 2^-10 |b| + 2^-24 (twice the rounding's bound for normals, and for subnormals)
double maxerr(const std::vector<float>& a, const std::vector<double>& b, bool half_store = false) { double m = 0;
  for (size_t i = 0; i < a.size(); ++i) { double d = std::fabs(a[i] - b[i]); if (half_store) d -= 0x1p-10 * std::fabs(b[i]) + 0x1p-24; double e = d / (1 + std::fabs(b[i])); if (!(e <= m)) m = e; } return m; }
// Floats rounded to half (nearest even), and stored elements read back as float: the f16 checks' inputs and outputs
std::vector<_Float16> half(const std::vector<float>& v) { return std::vector<_Float16>(v.begin(), v.end()); }
template <typename T> std::vector<float> wide(const std::vector<T>& v) { return std::vector<float>(v.begin(), v.end()); }
int main() {
  // GEMM all variants, odd sizes
  int m = 70, n = 45, k = 33;
  auto A = rnd(m * k), B = rnd(k * n); std::vector<double> ref(m * n);
  for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) { double s = 0; for (int p = 0; p < k; ++p) s += (double)A[i*k+p] * B[p*n+j]; ref[i*n+j] = s; }
  auto run_gemm = [&](const char* name, auto kern, unsigned tn, unsigned tm, unsigned bx, unsigned by) {
    std::vector<float> C(m * n, NAN);
    launch([&] { kern(A.data(), B.data(), C.data(), m, n, k, 0, 0, 0, 0); }, (n + tn - 1) / tn, (m + tm - 1) / tm, 1, bx, by, 1);
    report(name, maxerr(C, ref), 1e-6);
  };
  run_gemm("gemm_naive_f32", gemm_naive_f32, 16, 16, 16, 16);
  run_gemm("gemm_tiled_f32", gemm_tiled_f32, 16, 16, 16, 16);
  run_gemm("gemm_blocked_f32_128x128x8_8x8", gemm_blocked_f32_128x128x8_8x8, 128, 128, 16, 16);
  run_gemm("gemm_blocked_f32_64x64x16_4x4", gemm_blocked_f32_64x64x16_4x4, 64, 64, 16, 16);
  run_gemm("gemm_blocked_f32_32x32x16_4x4", gemm_blocked_f32_32x32x16_4x4, 32, 32, 8, 8);
  { // f16 blocked
    std::vector<_Float16> Ah(A.begin(), A.end()), Bh(B.begin(), B.end()), Ch(m * n);
    launch([&] { gemm_blocked_f16_32x32x16_4x4(Ah.data(), Bh.data(), Ch.data(), m, n, k, 0, 0, 0, 0); }, 2, 3, 1, 8, 8, 1);
    std::vector<float> C(Ch.begin(), Ch.end()); report("gemm_blocked_f16_32x32x16_4x4 (f16 output)", maxerr(C, ref), 2e-3);
  }
  // elementwise
  int N = 1030; auto X = rnd(N), Y = rnd(N); std::vector<float> Z(N, NAN);
  unsigned g = ((N + 3) / 4 + 255) / 256;
  launch([&] { vec_add_f32(X.data(), Y.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1);
  { std::vector<double> r(N); for (int i = 0; i < N; ++i) r[i] = (double)X[i] + Y[i]; report("vec_add_f32", maxerr(Z, r), 0); }
  launch([&] { vec_add_wrong_f32(X.data(), Y.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1);
  { int bad = 0; for (int i = 0; i < N; ++i) bad += Z[i] != X[i] + Y[i]; report("vec_add_wrong_f32: exactly element 7 off by 1", (bad == 1 && Z[7] - (X[7] + Y[7]) == 1.0f) ? 0 : 1, 0); }
  launch([&] { triad_f32(X.data(), Y.data(), Z.data(), 3.0f, N); }, g, 1, 1, 256, 1, 1);
  { std::vector<double> r(N); for (int i = 0; i < N; ++i) r[i] = X[i] + 3.0 * Y[i]; report("triad_f32", maxerr(Z, r), 0); }
  { std::vector<float> big(N); for (int i = 0; i < N; ++i) big[i] = (i - N / 2) * 0.2f;
    launch([&] { sigmoid_f32(big.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1);
    std::vector<double> r(N); for (int i = 0; i < N; ++i) r[i] = 1 / (1 + std::exp(-(double)big[i])); report("sigmoid_f32", maxerr(Z, r), 1e-6);
    launch([&] { tanh_f32(big.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1);
    for (int i = 0; i < N; ++i) r[i] = std::tanh((double)big[i]); report("tanh_f32", maxerr(Z, r), 1e-6);
    launch([&] { gelu_f32(big.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1);
    for (int i = 0; i < N; ++i) { double v = big[i]; r[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); } report("gelu_f32", maxerr(Z, r), 1e-6);
    double me = 0; for (float x = -87; x < 88; x += 0.0137f) { double e = std::fabs(gf_expf(x) / std::exp((double)x) - 1); if (e > me) me = e; } report("gf_expf on [-87, 88)", me, 2.4e-7);
    // gf_logf: relative to ln x away from 1, absolute (of the f32 input's own rounding) near it
    me = 0; for (uint32_t b = 1; b < 0x7f800000u; b += 4099) { const float x = __builtin_bit_cast(float, b); double l = std::log((double)x), e = std::fabs(gf_logf(x) - l) / std::max(std::fabs(l), 1.0); if (e > me) me = e; } report("gf_logf on every 4099th positive float", me, 2.4e-7);
    { bool ok = std::isnan(gf_logf(-1.0f)) && std::isnan(gf_logf(NAN)) && gf_logf(0.0f) == -INFINITY && gf_logf(INFINITY) == INFINITY && gf_logf(1.0f) == 0.0f; report("gf_logf special values", ok ? 0 : 1, 0); }
  }
  // rows
  for (auto [rows, cols, wg, cached] : std::vector<std::tuple<int,int,int,bool>>{{5, 1, 64, true}, {5, 100, 256, true}, {3, 5000, 256, false}, {3, 9000, 1024, false}, {70000 / 1000, 64, 64, false}}) {
    auto x = rnd(rows * cols), ga = rnd(cols), be = rnd(cols), g2 = rnd(cols); std::vector<float> y(rows * cols, NAN);
    std::vector<double> r(rows * cols), r2(rows * cols), r3(rows * cols), r4(rows * cols), r5(rows * cols);
    for (int i = 0; i < rows; ++i) { double mx = -1e30, s = 0, mean = 0, var = 0, ss = 0; const float* xr = &x[i*cols];
      for (int c = 0; c < cols; ++c) { mx = std::max(mx, (double)xr[c]); mean += xr[c]; ss += (double)xr[c]*xr[c]; } mean /= cols;
      for (int c = 0; c < cols; ++c) { s += std::exp(xr[c] - mx); var += (xr[c]-mean)*(xr[c]-mean); } var /= cols;
      double zz = 0; for (int c = 0; c < cols; ++c) { r[i*cols+c] = std::exp(xr[c]-mx)/s; r5[i*cols+c] = (xr[c]-mx)-std::log(s); r2[i*cols+c] = (xr[c]-mean)/std::sqrt(var+1e-5)*ga[c]+be[c]; r3[i*cols+c] = xr[c]/std::sqrt(ss/cols+1e-5)*ga[c]; zz += r2[i*cols+c]*r2[i*cols+c]; }
      for (int c = 0; c < cols; ++c) r4[i*cols+c] = r2[i*cols+c]/std::sqrt(zz/cols+1e-5)*g2[c]; }
    auto go = [&](auto f) { launch(f, std::min(rows, 2), 1, 1, wg, 1, 1); };
    #define ROWS(WG, SUF) \
      go([&] { softmax_rows_##SUF(x.data(), y.data(), rows, cols); }); double e1 = maxerr(y, r); \
      go([&] { log_softmax_rows_##SUF(x.data(), y.data(), rows, cols); }); double e5 = maxerr(y, r5); \
      go([&] { layernorm_rows_##SUF(x.data(), ga.data(), be.data(), y.data(), rows, cols, 1e-5f); }); double e2 = maxerr(y, r2); \
      go([&] { rmsnorm_rows_##SUF(x.data(), ga.data(), y.data(), rows, cols, 1e-5f); }); double e3 = maxerr(y, r3); \
      go([&] { layernorm_rmsnorm_rows_##SUF(x.data(), ga.data(), be.data(), g2.data(), y.data(), rows, cols, 1e-5f); }); double e4 = maxerr(y, r4); \
      { char n[64]; snprintf(n, sizeof n, "softmax_rows_%s %dx%d", #SUF, rows, cols); report(n, e1, 1e-6); \
        snprintf(n, sizeof n, "log_softmax_rows_%s %dx%d", #SUF, rows, cols); report(n, e5, 1e-6); \
        snprintf(n, sizeof n, "layernorm_rows_%s %dx%d", #SUF, rows, cols); report(n, e2, 2e-6); \
        snprintf(n, sizeof n, "rmsnorm_rows_%s %dx%d", #SUF, rows, cols); report(n, e3, 2e-6); \
        snprintf(n, sizeof n, "layernorm_rmsnorm_rows_%s %dx%d", #SUF, rows, cols); report(n, e4, 2e-6); }
    if (wg == 64 && cached) { ROWS(64, 64_cached) } else if (wg == 64) { ROWS(64, 64) } else if (wg == 256 && cached) { ROWS(256, 256_cached) } else if (wg == 256) { ROWS(256, 256) } else { ROWS(1024, 1024) }
  }
  // conv: direct vs im2col + batched gemm
  { int B_ = 2, C_ = 3, H = 9, W = 7, F = 5, KS = 3, S = 2, P = 1; int OH = (H + 2*P - KS)/S + 1, OW = (W + 2*P - KS)/S + 1;
    auto in = rnd(B_*C_*H*W), w = rnd(F*C_*KS*KS); std::vector<float> o1(B_*F*OH*OW, NAN), o2(B_*F*OH*OW, NAN); std::vector<double> r(o1.size());
    for (int b = 0; b < B_; ++b) for (int f = 0; f < F; ++f) for (int oy = 0; oy < OH; ++oy) for (int ox = 0; ox < OW; ++ox) { double s = 0;
      for (int c = 0; c < C_; ++c) for (int ky = 0; ky < KS; ++ky) for (int kx = 0; kx < KS; ++kx) { int iy = oy*S+ky-P, ix = ox*S+kx-P; if (iy>=0&&iy<H&&ix>=0&&ix<W) s += (double)w[((f*C_+c)*KS+ky)*KS+kx]*in[((b*C_+c)*H+iy)*W+ix]; }
      r[((b*F+f)*OH+oy)*OW+ox] = s; }
    int total = B_*F*OH*OW; launch([&] { conv2d_direct_k3(in.data(), w.data(), o1.data(), B_, C_, H, W, F, S, P, OH, OW); }, (total+255)/256, 1, 1, 256, 1, 1);
    int ckk = C_*KS*KS, plane = OH*OW; std::vector<float> col(B_*ckk*plane);
    launch([&] { im2col_k3(in.data(), col.data(), 0, B_, C_, H, W, S, P, OH, OW); }, (B_*ckk*plane+255)/256, 1, 1, 256, 1, 1);
    launch([&] { gemm_blocked_f32_32x32x16_4x4(w.data(), col.data(), o2.data(), F, plane, ckk, 0, ckk*plane, F*plane, 0); }, (plane+31)/32, (F+31)/32, B_, 8, 8, 1);
    report("conv2d_direct_k3", maxerr(o1, r), 1e-6); report("im2col_k3 + gemm_blocked (batched)", maxerr(o2, r), 1e-6); }
  // model.hip: a strided conv as model_conv unsplit and split in 3 + the op-4 reduce; depthwise ReLU6,
  // max-pool, average pool and add on model_layer; each against f64, for each storage: float, then half
  // (model_*_f16: images and weights rounded to half, the reference from those values, the outputs half but
  // the float partial sums, which op 4 reads as its x; max-pool exact, the rest allowed the half store's rounding)
  { const int N_ = 2, C_ = 5, H = 9, W = 7, F = 70, K = 3, S = 2, P = 1, OH = (H + 2*P - K)/S + 1, OW = (W + 2*P - K)/S + 1;
    const int nf = F*C_*K*K, ncols = N_*OH*OW, kdim = C_*K*K, total = N_*F*OH*OW;
    const auto xf = rnd(N_*C_*H*W), wf = rnd(nf + F);
    auto model = [&](auto zero, const char* suf, auto conv, auto layer) { using T = decltype(zero); const bool h = sizeof(T) == 2;
      const std::vector<T> xs(xf.begin(), xf.end()), ws(wf.begin(), wf.end()); const auto x = wide(xs), wb = wide(ws);
      const std::string cv = std::string("model_conv") + suf, ly = std::string("model_layer") + suf;
      auto check = [&](const std::string& what, const std::vector<T>& o, const std::vector<double>& r, double tol, bool store) { report(what.c_str(), maxerr(wide(o), r, store), tol); };
      std::vector<double> r(total);
      for (int b = 0; b < N_; ++b) for (int f = 0; f < F; ++f) for (int oy = 0; oy < OH; ++oy) for (int ox = 0; ox < OW; ++ox) { double s = wb[nf + f];
        for (int c = 0; c < C_; ++c) for (int ky = 0; ky < K; ++ky) for (int kx = 0; kx < K; ++kx) { int iy = oy*S+ky-P, ix = ox*S+kx-P; if (iy>=0&&iy<H&&ix>=0&&ix<W) s += (double)wb[((f*C_+c)*K+ky)*K+kx]*x[((b*C_+c)*H+iy)*W+ix]; }
        r[((b*F+f)*OH+oy)*OW+ox] = std::max(s, 0.0); }
      std::vector<T> o1(total, T(NAN)), o2(total, T(NAN)); std::vector<float> part(3*F*ncols, NAN);
      launch([&] { conv(xs.data(), ws.data(), o1.data(), part.data(), 0, 0, nf, 0, C_, H, W, F, OH, OW, K, S, P, 1, ncols, kdim, kdim, 1); }, (ncols+63)/64, (F+63)/64, 1, 256, 1, 1);
      check(cv + " (one chunk, bias, ReLU)", o1, r, 1e-5, h);
      launch([&] { conv(xs.data(), ws.data(), o2.data(), part.data(), 0, 0, nf, 0, C_, H, W, F, OH, OW, K, S, P, 1, ncols, kdim, 16, 3); }, (ncols+63)/64, (F+63)/64, 3, 256, 1, 1);
      launch([&] { layer((const T*)part.data(), ws.data(), o2.data(), o2.data(), 4, total, 0, 0, nf, 0, 0, F, 1, 1, F, OH, OW, 1, 1, 0, 3, 1); }, (total+255)/256, 1, 1, 256, 1, 1);
      check(cv + " (3 chunks) + " + ly + " reduce", o2, r, 1e-5, h);
      // depthwise 3×3 stride 1 with ReLU6, then max-pool 3×3/2 pad 1, average pool, add of the two convs' inputs
      std::vector<double> rd(N_*C_*H*W), rm(N_*C_*5*4), ra(N_*C_), rs(N_*C_*H*W);
      for (int b = 0; b < N_; ++b) for (int c = 0; c < C_; ++c) { double sum = 0;
        for (int oy = 0; oy < H; ++oy) for (int ox = 0; ox < W; ++ox) { double s = wb[C_*9 + c];
          for (int ky = 0; ky < 3; ++ky) for (int kx = 0; kx < 3; ++kx) { int iy = oy+ky-1, ix = ox+kx-1; if (iy>=0&&iy<H&&ix>=0&&ix<W) s += (double)wb[c*9+ky*3+kx]*x[((b*C_+c)*H+iy)*W+ix]; }
          int i = ((b*C_+c)*H+oy)*W+ox; rd[i] = std::min(std::max(s, 0.0), 6.0); sum += x[i]; rs[i] = 2.0 * x[i]; }
        ra[b*C_+c] = sum / (H*W);
        for (int oy = 0; oy < 5; ++oy) for (int ox = 0; ox < 4; ++ox) { double m = -INFINITY;
          for (int ky = 0; ky < 3; ++ky) for (int kx = 0; kx < 3; ++kx) { int iy = oy*2+ky-1, ix = ox*2+kx-1; if (iy>=0&&iy<H&&ix>=0&&ix<W) m = std::max(m, (double)x[((b*C_+c)*H+iy)*W+ix]); }
          rm[((b*C_+c)*5+oy)*4+ox] = m; } }
      std::vector<T> od(rd.size(), T(NAN)), om(rm.size(), T(NAN)), oa(ra.size(), T(NAN)), os(rs.size(), T(NAN));
      int n1 = (int)rd.size(), n2 = (int)rm.size(), n3 = (int)ra.size();
      launch([&] { layer(xs.data(), ws.data(), od.data(), xs.data(), 0, n1, 0, 0, C_*9, 0, 0, C_, H, W, C_, H, W, 3, 1, 1, C_, 2); }, (n1+255)/256, 1, 1, 256, 1, 1);
      check(ly + " op 0 (depthwise, ReLU6)", od, rd, 1e-5, h);
      launch([&] { layer(xs.data(), ws.data(), om.data(), xs.data(), 1, n2, 0, 0, 0, 0, 0, C_, H, W, C_, 5, 4, 3, 2, 1, 1, 0); }, 1, 1, 1, 256, 1, 1);
      check(ly + " op 1 (max-pool, grid-strided)", om, rm, 0, false);
      launch([&] { layer(xs.data(), ws.data(), oa.data(), xs.data(), 2, n3, 0, 0, 0, 0, 0, C_, H, W, C_, 1, 1, 1, 1, 0, 1, 0); }, 1, 1, 1, 256, 1, 1);
      check(ly + " op 2 (average pool)", oa, ra, 1e-6, h);
      launch([&] { layer(xs.data(), ws.data(), os.data(), xs.data(), 3, n1, 0, 0, 0, 0, 0, C_, H, W, C_, H, W, 1, 1, 0, 1, 0); }, 2, 1, 1, 256, 1, 1);
      check(ly + " op 3 (add)", os, rs, 0, h); };
    model(0.0f, "", model_conv, model_layer);
    model((_Float16)0, "_f16", model_conv_f16, model_layer_f16); }
  // noop, copy, relu
  { std::vector<float> o(1, NAN); launch([&] { noop_f32(X.data(), o.data()); }, 1, 1, 1, 1, 1, 1); report("noop_f32", o[0] == X[0] ? 0 : 1, 0);
    launch([&] { copy_f32(X.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1); report("copy_f32", Z == X ? 0 : 1, 0);
    launch([&] { relu_f32(X.data(), Z.data(), N); }, g, 1, 1, 256, 1, 1); int bad = 0; for (int i = 0; i < N; ++i) bad += Z[i] != std::max(X[i], 0.0f); report("relu_f32", bad, 0); }
  // llm.hip: every transformer kernel against f64, buffers padded with a sentinel on both sides (a stray or
  // missing write shows); f16 weights are the random floats rounded to _Float16, the reference reads them back
  { const float S = 7.5f; const int PAD = 5;
    auto go = [](unsigned groups, unsigned block, auto f) { launch(f, groups, 1, 1, block, 1, 1); };
    auto check = [&](const char* name, const std::vector<float>& o, const std::vector<double>& r, double tol) { report(name, maxerr(o, r), tol); };
    char nm[96];
    { // embed: tokens at 1, 3, 5, 7, 9: 9 clamps to 6, -1 to 0, 3.7 truncates to 3
      const int rows = 5, dim = 100, vocab = 7, tok_off = 1, tok_stride = 2, out_off = 3; const long table_off = 3;
      std::vector<float> tok = {0, 2, 0, 9, 0, -1, 0, 3.7f, 0, 6, 0}; const int ids[] = {2, 6, 0, 3, 6};
      auto tf = rnd(table_off + vocab * dim); auto th = half(tf); auto tr = wide(th);
      auto ref = [&](const std::vector<float>& t) { std::vector<double> r(out_off + rows * dim + PAD, S);
        for (int i = 0; i < rows * dim; ++i) r[out_off + i] = t[table_off + ids[i / dim] * dim + i % dim]; return r; };
      std::vector<float> o(out_off + rows * dim + PAD, S);
      go(1, 256, [&] { llm_embed_f32(tok.data(), tf.data(), o.data(), tok_off, tok_stride, table_off, out_off, rows, dim, vocab); });
      check("llm_embed_f32 (clamped tokens, grid-strided)", o, ref(tf), 0);
      std::fill(o.begin(), o.end(), S);
      go(1, 256, [&] { llm_embed_f16(tok.data(), th.data(), o.data(), tok_off, tok_stride, table_off, out_off, rows, dim, vocab); });
      check("llm_embed_f16 (clamped tokens, grid-strided)", o, ref(tr), 0); }
    { // rmsnorm: 3 rows of 300 at stride 310 over 2 groups
      const int rows = 3, dim = 300, stride = 310, x_off = 5, out_off = 3; const long g_off = 7;
      auto x = rnd(x_off + rows * stride), gf = rnd(g_off + dim); auto gh = half(gf); auto gr = wide(gh);
      auto ref = [&](const std::vector<float>& g) { std::vector<double> r(out_off + rows * dim + PAD, S);
        for (int i = 0; i < rows; ++i) { const float* xr = &x[x_off + i * stride]; double ss = 0; for (int d = 0; d < dim; ++d) ss += (double)xr[d] * xr[d];
          for (int d = 0; d < dim; ++d) r[out_off + i * dim + d] = xr[d] / std::sqrt(ss / dim + 1e-5) * g[g_off + d]; } return r; };
      std::vector<float> o(out_off + rows * dim + PAD, S);
      go(2, 256, [&] { llm_rmsnorm_f32(x.data(), gf.data(), o.data(), x_off, stride, g_off, out_off, rows, dim, 1e-5f); });
      check("llm_rmsnorm_f32 3x300, row stride 310", o, ref(gf), 2e-6);
      std::fill(o.begin(), o.end(), S);
      go(2, 256, [&] { llm_rmsnorm_f16(x.data(), gh.data(), o.data(), x_off, stride, g_off, out_off, rows, dim, 1e-5f); });
      check("llm_rmsnorm_f16 3x300, row stride 310", o, ref(gr), 2e-6); }
    // gemv (vector loads when offsets and k are multiples of 8, element loads otherwise; 5 groups for 12 feature
    // quads, 11 rows = 8 + 3) and matmul (2 row tiles), both weight types
    for (auto [rows, k, n, x_off, w_off] : std::vector<std::tuple<int, int, int, int, long>>{{11, 520, 45, 8, 16}, {11, 64, 45, 0, 8}, {11, 523, 45, 3, 5}, {11, 37, 45, 1, 7}, {70, 37, 45, 3, 5}}) {
      const int out_off = 2; const bool mm = rows > 16;
      auto x = rnd(x_off + rows * k), wf = rnd(w_off + (long)n * k); auto wh = half(wf); auto wr = wide(wh);
      auto ref = [&](const std::vector<float>& w) { std::vector<double> r(out_off + rows * n + PAD, S);
        for (int i = 0; i < rows; ++i) for (int j = 0; j < n; ++j) { double s = 0; for (int p = 0; p < k; ++p) s += (double)x[x_off + i * k + p] * w[w_off + (long)j * k + p]; r[out_off + i * n + j] = s; } return r; };
      std::vector<float> o(out_off + rows * n + PAD, S);
      const char* how = mm ? "" : ((w_off | k | x_off) & 7) == 0 ? " vec" : " elem";
      for (int h = 0; h < 2; ++h) {
        std::fill(o.begin(), o.end(), S);
        if (mm) launch([&] { h ? llm_matmul_f16(x.data(), wh.data(), o.data(), x_off, w_off, out_off, rows, k, n) : llm_matmul_f32(x.data(), wf.data(), o.data(), x_off, w_off, out_off, rows, k, n); }, (n + 63) / 64, (rows + 63) / 64, 1, 16, 16, 1);
        else go(5, 64, [&] { h ? llm_gemv_f16(x.data(), wh.data(), o.data(), x_off, w_off, out_off, rows, k, n) : llm_gemv_f32(x.data(), wf.data(), o.data(), x_off, w_off, out_off, rows, k, n); });
        snprintf(nm, sizeof nm, "llm_%s_%s %dx%dx%d off %d/%ld%s", mm ? "matmul" : "gemv", h ? "f16" : "f32", rows, k, n, x_off, w_off, how);
        check(nm, o, ref(h ? wr : wf), 1e-5); } }
    // quantized gemv and embedding: hand-made blocks (values then f16 scales, each matrix at its own byte
    // offsets, Q4_0 two values a byte: weight i low nibble, i + 16 high), references from the values written
    for (int bits : {8, 4}) {
      const int rows = 3, k = 96, n = 37, x_off = 5, out_off = 2, nb = k / 32, qb = bits == 8 ? 32 : 16;
      const long v_off = 64, s_off = v_off + (long)n * nb * qb + 6;
      std::vector<unsigned char> w(s_off + 2L * n * nb + 8, 0xAB); std::vector<double> deq((size_t)n * k);
      std::uniform_int_distribution<int> qd(bits == 8 ? -127 : -8, bits == 8 ? 127 : 7);
      for (long blk = 0; blk < (long)n * nb; ++blk) {
        const _Float16 d = (_Float16)(std::ldexp(1.0, -(int)(blk % 5)) * (blk % 2 ? -1 : 1)); std::memcpy(&w[s_off + 2 * blk], &d, 2);
        for (int i = 0; i < 32; ++i) { const int q = qd(rng); deq[blk * 32 + i] = (double)d * q;
          if (bits == 8) w[v_off + blk * 32 + i] = (unsigned char)(signed char)q;
          else { unsigned char& byte = w[v_off + blk * 16 + i % 16]; if (i < 16) byte = (unsigned char)(q + 8); else byte |= (unsigned char)((q + 8) << 4); } } }
      auto x = rnd(x_off + rows * k); std::vector<double> r(out_off + rows * n + PAD, S); std::vector<float> o(r.size(), S);
      for (int i = 0; i < rows; ++i) for (int j = 0; j < n; ++j) { double acc = 0; for (int p = 0; p < k; ++p) acc += deq[(size_t)j * k + p] * x[x_off + i * k + p]; r[out_off + i * n + j] = acc; }
      go(1, 256, [&] { bits == 8 ? llm_qgemv_q8(x.data(), w.data(), o.data(), x_off, v_off, s_off, out_off, rows, k, n) : llm_qgemv_q4(x.data(), w.data(), o.data(), x_off, v_off, s_off, out_off, rows, k, n); });
      snprintf(nm, sizeof nm, "llm_qgemv_q%d %dx%dx%d", bits, rows, k, n); check(nm, o, r, 1e-5);
      // the same product by llm_matmul's tiles (one partial 64×64 tile)
      std::fill(o.begin(), o.end(), S);
      launch([&] { bits == 8 ? llm_qmatmul_q8(x.data(), w.data(), o.data(), x_off, v_off, s_off, out_off, rows, k, n) : llm_qmatmul_q4(x.data(), w.data(), o.data(), x_off, v_off, s_off, out_off, rows, k, n); }, (n + 63) / 64, (rows + 63) / 64, 1, 16, 16, 1);
      snprintf(nm, sizeof nm, "llm_qmatmul_q%d %dx%dx%d", bits, rows, k, n); check(nm, o, r, 1e-5);
      // embed rows of the same matrix as a table [n][k]: tokens 4, 36 (clamped to 36), 0
      std::vector<float> tok = {4, 99, -3}; const int ids[] = {4, 36, 0}; std::vector<double> re(out_off + 3 * k + PAD, S); std::vector<float> oe(re.size(), S);
      for (int i = 0; i < 3 * k; ++i) re[out_off + i] = deq[(size_t)ids[i / k] * k + i % k];
      go(1, 256, [&] { bits == 8 ? llm_qembed_q8(tok.data(), w.data(), oe.data(), 0, 1, v_off, s_off, out_off, 3, k, n) : llm_qembed_q4(tok.data(), w.data(), oe.data(), 0, 1, v_off, s_off, out_off, 3, k, n); });
      snprintf(nm, sizeof nm, "llm_qembed_q%d (clamped tokens)", bits); check(nm, oe, re, 0); }
    // rope: q to the arena, k and v to the caches at (pos·batch + seq)·kvd; random cos/sin tables
    for (auto [rows, per_seq, batch, pos0, heads, kvh, hd] : std::vector<std::tuple<int, int, int, int, int, int, int>>{{4, 2, 2, 3, 4, 2, 8}, {3, 3, 1, 2, 2, 1, 32}}) {
      const int half_d = hd / 2, qd = heads * hd, kvd = kvh * hd, width = qd + 2 * kvd, positions = pos0 + per_seq + 1;
      const int x_off = 3, t_off = 2, q_off = 1, k_off = q_off + rows * qd + 4, v_off = k_off + positions * batch * kvd + 2, size = v_off + positions * batch * kvd + PAD;
      auto x = rnd(x_off + rows * width), tab = rnd(t_off + 2 * positions * half_d); std::vector<float> o(size, S); std::vector<double> r(size, S);
      for (int i = 0; i < rows; ++i) { const int seq = i / per_seq, pos = pos0 + i % per_seq; const float* xr = &x[x_off + i * width];
        for (int hh = 0; hh < heads + kvh; ++hh) for (int e = 0; e < half_d; ++e) { const int c = hh * hd + e;
          const double cs = tab[t_off + pos * half_d + e], sn = tab[t_off + (positions + pos) * half_d + e], a = xr[c], b = xr[c + half_d];
          double* dst = hh < heads ? &r[q_off + i * qd + c] : &r[k_off + (pos * batch + seq) * kvd + c - qd]; dst[0] = a * cs - b * sn; dst[half_d] = b * cs + a * sn; }
        for (int c = 0; c < kvd; ++c) r[v_off + (pos * batch + seq) * kvd + c] = xr[qd + kvd + c]; }
      go(1, 256, [&] { llm_rope(x.data(), tab.data(), o.data(), x_off, t_off, q_off, k_off, v_off, rows, per_seq, pos0, heads, kvh, hd, positions, batch); });
      snprintf(nm, sizeof nm, "llm_rope %d rows b%d pos0 %d heads %d/%d x %d", rows, batch, pos0, heads, kvh, hd); check(nm, o, r, 1e-6); }
    // attention over a cache of random keys and values (every position filled), grouped-query heads 4/2
    // (chunk > 0: split along the sequence in chunks of that many positions, then llm_attention_merge)
    auto attention = [&](const char* name, auto kern, int hd, int wg, int rows, int per_seq, int batch, int pos0, unsigned groups, int chunk) {
      const int heads = 4, kvh = 2, qd = heads * hd, kvd = kvh * hd, cap = pos0 + per_seq, q_off = 3, k_off = 2, v_off = 1, out_off = 4;
      auto q = rnd(q_off + rows * qd), kc = rnd(k_off + cap * batch * kvd), vc = rnd(v_off + cap * batch * kvd);
      for (auto* v : {&q, &kc}) for (auto& e : *v) e *= 0.5f;  // scores of a few units: the softmax is neither flat nor one-hot
      const double scale = 1 / std::sqrt((double)hd); std::vector<float> o(out_off + rows * qd + PAD, S); std::vector<double> r(o.size(), S);
      for (int i = 0; i < rows; ++i) for (int h = 0; h < heads; ++h) { const int seq = i / per_seq, pos = pos0 + i % per_seq, g = h / (heads / kvh);
        std::vector<double> s(pos + 1); double mx = -INFINITY, den = 0;
        for (int t = 0; t <= pos; ++t) { double a = 0; for (int d = 0; d < hd; ++d) a += (double)q[q_off + i * qd + h * hd + d] * kc[k_off + (t * batch + seq) * kvd + g * hd + d]; s[t] = a * scale; mx = std::max(mx, s[t]); }
        for (auto& e : s) { e = std::exp(e - mx); den += e; }
        for (int d = 0; d < hd; ++d) { double y = 0; for (int t = 0; t <= pos; ++t) y += s[t] * vc[v_off + (t * batch + seq) * kvd + g * hd + d]; r[out_off + i * qd + h * hd + d] = y / den; } }
      const int chunks = chunk > 0 ? (cap + chunk - 1) / chunk : 1;
      std::vector<float> part(chunk > 0 ? rows * heads * chunks * (hd + 2) : 1, S);
      go(groups, wg, [&] { kern(q.data(), kc.data(), vc.data(), o.data(), part.data(), q_off, k_off, v_off, out_off, rows, per_seq, pos0, heads, kvh, batch, (float)scale, chunk, chunks); });
      if (chunk > 0) go(2, 256, [&] { llm_attention_merge(part.data(), o.data(), out_off, rows * qd, hd, chunks); });
      snprintf(nm, sizeof nm, "%s %d rows b%d pos0 %d chunks %d", name, rows, batch, pos0, chunks); check(nm, o, r, 1e-5); };
    attention("llm_attention_hd32", llm_attention_hd32, 32, 32, 6, 3, 2, 5, 10, 0);
    attention("llm_attention_hd64", llm_attention_hd64, 64, 32, 2, 2, 1, 40, 8, 0);
    attention("llm_attention_hd128", llm_attention_hd128, 128, 32, 1, 1, 1, 33, 4, 0);
    attention("llm_attention_hd256", llm_attention_hd256, 256, 16, 2, 2, 1, 2, 3, 0);
    // split: chunks past a row's position stay empty (rows at pos0 .. pos0 + 2 over 3 chunks of 16)
    attention("llm_attention_hd64", llm_attention_hd64, 64, 32, 3, 3, 1, 37, 5, 16);
    attention("llm_attention_hd128", llm_attention_hd128, 128, 32, 2, 1, 2, 70, 7, 16);
    { // swiglu, add, copy, grid-strided over 2 groups
      const int rows = 3, ffn = 300, n = rows * ffn; auto x = rnd(2 + 2 * n), y = rnd(n + 4); std::vector<float> o(1 + n + PAD, S); std::vector<double> r(o.size(), S);
      for (int i = 0; i < n; ++i) { const double g = x[2 + i / ffn * 2 * ffn + i % ffn], u = x[2 + i / ffn * 2 * ffn + ffn + i % ffn]; r[1 + i] = g / (1 + std::exp(-g)) * u; }
      go(2, 256, [&] { llm_swiglu(x.data(), o.data(), 2, 1, rows, ffn); }); check("llm_swiglu 3x300", o, r, 1e-6);
      std::fill(o.begin(), o.end(), S); for (int i = 0; i < n; ++i) r[1 + i] = (double)x[3 + i] + y[4 + i];
      go(2, 256, [&] { llm_add(x.data(), y.data(), o.data(), 3, 4, 1, n); }); check("llm_add 900", o, r, 0);
      std::fill(o.begin(), o.end(), S); for (int i = 0; i < n; ++i) r[1 + i] = x[5 + i];
      go(2, 256, [&] { llm_copy(x.data(), o.data(), 5, 1, n); }); check("llm_copy 900", o, r, 0); } }
  // peak.hip: compute_peak in every type against its closed form (each pair adds 1: item i ends at
  // 8·(i mod 8) + 28 + 8·pairs), 300 items over 2 blocks, 37 pairs (4 unrolled trips and 5 single pairs)
  { const float K[4] = {-1, 1, 2, 0}; const int items = 300, pairs = 37;
    auto peak = [&](const char* name, auto kern) { std::vector<float> o(items + 1, NAN); o[items] = 7.5f;
      launch([&] { kern(K, o.data(), items, pairs); }, 2, 1, 1, 256, 1, 1); int bad = o[items] != 7.5f;
      for (int i = 0; i < items; ++i) bad += o[i] != (float)(8 * (i % 8) + 28 + 8 * pairs); report(name, bad, 0); };
    peak("compute_peak_fp32", compute_peak_fp32); peak("compute_peak_fp16", compute_peak_fp16);
    peak("compute_peak_fp64", compute_peak_fp64); peak("compute_peak_int32", compute_peak_int32);
    // int8: each pair adds 1 to a chain's low byte, which wraps past 255 (300 pairs)
    { const int p8 = 300; std::vector<float> o(items + 1, NAN); o[items] = 7.5f;
      launch([&] { compute_peak_int8(K, o.data(), items, p8); }, 2, 1, 1, 256, 1, 1); int bad = o[items] != 7.5f;
      for (int i = 0; i < items; ++i) { int want = 0; for (int j = 0; j < 8; ++j) want += (i % 8 + j + p8) % 256;
        bad += o[i] != (float)want; } report("compute_peak_int8 (300 pairs)", bad, 0); }
    // roofline: y = x + pairs on 1030 elements (a ragged tail) over 2 blocks, 0 and 7 pairs
    for (int pr : {0, 7}) { const int n = 1030; auto x = rnd(n); std::vector<float> y(n + 1, NAN); y[n] = 7.5f;
      launch([&] { roofline(x.data(), K, y.data(), n, pr); }, 2, 1, 1, 256, 1, 1); int bad = y[n] != 7.5f;
      for (int i = 0; i < n; ++i) bad += y[i] != x[i] + pr; report(pr ? "roofline (7 pairs)" : "roofline (0 pairs)", bad, 0); } }
  if (failures) { printf("%d kernel check(s) failed\n", failures); return 1; }
  printf("all kernel checks passed\n");
  return 0;
}
