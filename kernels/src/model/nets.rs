//! The networks' layer lists: simple_cnn, ResNet-18 and MobileNetV2 as the papers define them,
//! appended by a [`Builder`] that tracks shapes and the weights and arena offsets.

use super::{Act, Conv, Graph, Layer, Net, Op, Shape};

/// Appends layers, tracking the current tensor and the offsets.
pub(super) struct Builder {
    pub(super) graph: Graph,
    /// Tensor the next layer reads.
    cur: usize,
}

impl Builder {
    pub(super) fn new(net: Net, batch: usize) -> Builder {
        let rgb = |side| Shape {
            c: 3,
            h: side,
            w: side,
        };
        let image = match net {
            Net::Layer { image, .. } => image,
            Net::SimpleCnn => rgb(32),
            Net::Resnet18 | Net::MobilenetV2 => rgb(224),
        };
        Builder {
            graph: Graph {
                net,
                batch,
                image,
                layers: Vec::new(),
                weights_len: 0,
                arena_len: 0,
            },
            cur: 0,
        }
    }

    /// Appends a layer reading `input`; returns its output tensor (and makes it current).
    pub(super) fn push(&mut self, name: String, op: Op, input: usize) -> usize {
        let inp = self.graph.shape(input);
        let out = match op {
            Op::Conv(c) => Shape {
                c: c.cout,
                h: (inp.h + 2 * c.pad - c.k) / c.stride + 1,
                w: (inp.w + 2 * c.pad - c.k) / c.stride + 1,
            },
            Op::MaxPool { k, stride, pad } => Shape {
                c: inp.c,
                h: (inp.h + 2 * pad - k) / stride + 1,
                w: (inp.w + 2 * pad - k) / stride + 1,
            },
            Op::GlobalAvgPool => Shape {
                c: inp.c,
                h: 1,
                w: 1,
            },
            Op::Add { .. } => inp,
            Op::Linear { cout, .. } => Shape {
                c: cout,
                h: 1,
                w: 1,
            },
        };
        let w_len = match op {
            Op::Conv(c) => c.cout * (inp.c / c.groups) * c.k * c.k,
            Op::Linear { cout, .. } => cout * inp.len(),
            _ => 0,
        };
        let layer = Layer {
            name,
            op,
            input,
            inp,
            out,
            w_offset: self.graph.weights_len,
            w_len,
            out_offset: self.graph.arena_len,
        };
        self.graph.weights_len += w_len + layer.bias_len();
        self.graph.arena_len += self.graph.batch * out.len();
        self.graph.layers.push(layer);
        self.cur = self.graph.layers.len();
        self.cur
    }

    fn conv(&mut self, name: String, cout: usize, k: usize, stride: usize, act: Act) -> usize {
        self.conv_from(name, self.cur, cout, k, stride, 1, act)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_from(
        &mut self,
        name: String,
        input: usize,
        cout: usize,
        k: usize,
        stride: usize,
        groups: usize,
        act: Act,
    ) -> usize {
        let conv = Conv {
            cout,
            k,
            stride,
            pad: k / 2,
            groups,
            act,
        };
        self.push(name, Op::Conv(conv), input)
    }

    fn channels(&self) -> usize {
        self.graph.shape(self.cur).c
    }
}

pub(super) fn simple_cnn(b: &mut Builder) {
    for (i, c) in [32, 64, 128].into_iter().enumerate() {
        b.conv(format!("conv{}", i + 1), c, 3, 1, Act::Relu);
        b.push(
            format!("pool{}", i + 1),
            Op::MaxPool {
                k: 2,
                stride: 2,
                pad: 0,
            },
            b.cur,
        );
    }
    b.push(
        "fc".into(),
        Op::Linear {
            cout: 10,
            act: Act::None,
        },
        b.cur,
    );
}

pub(super) fn resnet18(b: &mut Builder) {
    b.conv("conv1".into(), 64, 7, 2, Act::Relu);
    b.push(
        "maxpool".into(),
        Op::MaxPool {
            k: 3,
            stride: 2,
            pad: 1,
        },
        b.cur,
    );
    for (stage, width) in [64, 128, 256, 512].into_iter().enumerate() {
        for block in 0..2 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let name = |part: &str| format!("layer{}.{block}.{part}", stage + 1);
            let x = b.cur;
            let skip = if stride != 1 || b.channels() != width {
                b.conv_from(name("downsample"), x, width, 1, stride, 1, Act::None)
            } else {
                x
            };
            b.conv_from(name("conv1"), x, width, 3, stride, 1, Act::Relu);
            b.conv(name("conv2"), width, 3, 1, Act::None);
            b.push(
                name("add"),
                Op::Add {
                    skip,
                    act: Act::Relu,
                },
                b.cur,
            );
        }
    }
    b.push("avgpool".into(), Op::GlobalAvgPool, b.cur);
    b.push(
        "fc".into(),
        Op::Linear {
            cout: 1000,
            act: Act::None,
        },
        b.cur,
    );
}

pub(super) fn mobilenet_v2(b: &mut Builder) {
    b.conv("features.0".into(), 32, 3, 2, Act::Relu6);
    // (expansion t, output channels c, repeats n, first stride s), as in the paper's table 2.
    const SETTINGS: [(usize, usize, usize, usize); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut index = 1;
    for (t, c, n, s) in SETTINGS {
        for r in 0..n {
            let stride = if r == 0 { s } else { 1 };
            let name = |part: &str| format!("features.{index}.{part}");
            let x = b.cur;
            let cin = b.channels();
            let hidden = cin * t;
            if t != 1 {
                b.conv(name("expand"), hidden, 1, 1, Act::Relu6);
            }
            let dw = b.cur;
            b.conv_from(name("dw"), dw, hidden, 3, stride, hidden, Act::Relu6);
            b.conv(name("project"), c, 1, 1, Act::None);
            if stride == 1 && cin == c {
                b.push(
                    name("add"),
                    Op::Add {
                        skip: x,
                        act: Act::None,
                    },
                    b.cur,
                );
            }
            index += 1;
        }
    }
    b.conv(format!("features.{index}"), 1280, 1, 1, Act::Relu6);
    b.push("avgpool".into(), Op::GlobalAvgPool, b.cur);
    b.push(
        "classifier".into(),
        Op::Linear {
            cout: 1000,
            act: Act::None,
        },
        b.cur,
    );
}
