// Gradient-check samples for the ops of core/ops/conv_ops.cc. Shapes are
// tiny (the check is a full Jacobian); the backprop ops get out_backprop
// tensors of the output shape their input_sizes / filter_sizes imply.
// Dilation inputs are random doubles: the window maxima are distinct by far
// more than the finite-difference step.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

AttrMap Window(std::vector<int64_t> strides, const char* padding,
               std::vector<int64_t> dilations) {
  return {{"strides", std::move(strides)},
          {"padding", std::string(padding)},
          {"dilations", std::move(dilations)}};
}
AttrMap With(AttrMap attrs, const char* name, std::vector<int64_t> sizes) {
  attrs.Set(name, std::move(sizes));
  return attrs;
}
AttrMap DilationWindow(std::vector<int64_t> strides, const char* padding,
                       std::vector<int64_t> rates) {
  return {{"strides", std::move(strides)},
          {"padding", std::string(padding)},
          {"rates", std::move(rates)}};
}

void AddConv2D(SampleList& s) {
  const auto one = L({1, 1, 1, 1}), two = L({1, 2, 2, 1});
  s.Add("Conv2D", "SAME stride 1", {R({1, 4, 4, 2}, 300), R({3, 3, 2, 2}, 301)},
        Window(one, "SAME", one));
  s.Add("Conv2D", "VALID stride 2, batch 2",
        {R({2, 5, 5, 2}, 302), R({2, 2, 2, 3}, 303)},
        Window(two, "VALID", one));
  s.Add("Conv2D", "SAME stride 2, odd sizes",
        {R({1, 5, 4, 1}, 304), R({3, 2, 1, 2}, 305)}, Window(two, "SAME", one));
  s.Add("Conv2D", "SAME dilation 2",
        {R({1, 5, 5, 1}, 306), R({2, 2, 1, 2}, 307)}, Window(one, "SAME", two));
  s.Add("Conv2D", "VALID dilation 2, stride (1,2)",
        {R({1, 5, 5, 2}, 308), R({2, 2, 2, 1}, 309)},
        Window(L({1, 1, 2, 1}), "VALID", two));
  s.Add("Conv2D", "1x1 pointwise", {R({2, 2, 3, 3}, 310), R({1, 1, 3, 2}, 311)},
        Window(one, "VALID", one));

  s.Add("Conv2DBackpropInput", "SAME stride 1",
        {R({2, 2, 2, 3}, 312), R({1, 4, 4, 3}, 313)},
        With(Window(one, "SAME", one), "input_sizes", L({1, 4, 4, 2})));
  s.Add("Conv2DBackpropInput", "VALID stride 2, uncovered edge",
        {R({2, 2, 2, 1}, 314), R({1, 2, 2, 1}, 315)},
        With(Window(two, "VALID", one), "input_sizes", L({1, 5, 5, 2})));
  s.Add("Conv2DBackpropInput", "SAME stride 2 dilation 2",
        {R({2, 2, 1, 2}, 316), R({1, 3, 2, 2}, 317)},
        With(Window(two, "SAME", two), "input_sizes", L({1, 5, 4, 1})));
  s.Add("Conv2DBackpropInput", "1x1 pointwise",
        {R({1, 1, 2, 2}, 318), R({2, 2, 2, 2}, 319)},
        With(Window(one, "VALID", one), "input_sizes", L({2, 2, 2, 2})));

  s.Add("Conv2DBackpropFilter", "SAME stride 1",
        {R({1, 4, 4, 2}, 320), R({1, 4, 4, 3}, 321)},
        With(Window(one, "SAME", one), "filter_sizes", L({2, 2, 2, 3})));
  s.Add("Conv2DBackpropFilter", "VALID stride 2, batch 2",
        {R({2, 5, 5, 1}, 322), R({2, 2, 2, 2}, 323)},
        With(Window(two, "VALID", one), "filter_sizes", L({2, 2, 1, 2})));
  s.Add("Conv2DBackpropFilter", "SAME dilation 2",
        {R({1, 4, 5, 1}, 324), R({1, 4, 5, 1}, 325)},
        With(Window(one, "SAME", two), "filter_sizes", L({2, 2, 1, 1})));
}

void AddDepthwise(SampleList& s) {
  const auto one = L({1, 1, 1, 1}), two = L({1, 2, 2, 1});
  s.Add("DepthwiseConv2dNative", "SAME multiplier 2",
        {R({1, 4, 4, 2}, 330), R({2, 2, 2, 2}, 331)}, Window(one, "SAME", one));
  s.Add("DepthwiseConv2dNative", "VALID stride 2, batch 2",
        {R({2, 5, 5, 3}, 332), R({2, 2, 3, 1}, 333)},
        Window(two, "VALID", one));
  s.Add("DepthwiseConv2dNative", "SAME dilation 2",
        {R({1, 4, 4, 2}, 334), R({2, 2, 2, 1}, 335)}, Window(one, "SAME", two));

  s.Add("DepthwiseConv2dNativeBackpropInput", "SAME multiplier 2",
        {R({2, 2, 2, 2}, 336), R({1, 3, 3, 4}, 337)},
        With(Window(one, "SAME", one), "input_sizes", L({1, 3, 3, 2})));
  s.Add("DepthwiseConv2dNativeBackpropInput", "VALID stride 2 dilation 2",
        {R({2, 2, 2, 1}, 338), R({1, 2, 2, 2}, 339)},
        With(Window(two, "VALID", two), "input_sizes", L({1, 5, 5, 2})));

  s.Add("DepthwiseConv2dNativeBackpropFilter", "SAME multiplier 2",
        {R({1, 3, 3, 2}, 340), R({1, 3, 3, 4}, 341)},
        With(Window(one, "SAME", one), "filter_sizes", L({2, 2, 2, 2})));
  s.Add("DepthwiseConv2dNativeBackpropFilter", "VALID stride 2, batch 2",
        {R({2, 5, 4, 2}, 342), R({2, 2, 2, 2}, 343)},
        With(Window(two, "VALID", one), "filter_sizes", L({2, 2, 2, 1})));
}

void AddConv3D(SampleList& s) {
  const auto one = L({1, 1, 1, 1, 1}), two = L({1, 2, 2, 2, 1});
  s.Add("Conv3D", "SAME stride 1",
        {R({1, 3, 3, 3, 1}, 350), R({2, 2, 2, 1, 2}, 351)},
        Window(one, "SAME", one));
  s.Add("Conv3D", "VALID strides (2,1,2)",
        {R({1, 4, 3, 4, 2}, 352), R({2, 2, 2, 2, 1}, 353)},
        Window(L({1, 2, 1, 2, 1}), "VALID", one));
  s.Add("Conv3D", "VALID dilation 2",
        {R({1, 4, 4, 4, 1}, 354), R({2, 2, 2, 1, 1}, 355)},
        Window(one, "VALID", two));
  s.Add("Conv3D", "SAME stride 2",
        {R({2, 3, 3, 2, 1}, 356), R({2, 1, 2, 1, 2}, 357)},
        Window(two, "SAME", one));

  s.Add("Conv3DBackpropInputV2", "SAME stride 1",
        {R({2, 2, 2, 1, 2}, 358), R({1, 3, 3, 3, 2}, 359)},
        With(Window(one, "SAME", one), "input_sizes", L({1, 3, 3, 3, 1})));
  s.Add("Conv3DBackpropInputV2", "VALID stride 2",
        {R({2, 2, 2, 2, 1}, 360), R({1, 2, 2, 2, 1}, 361)},
        With(Window(two, "VALID", one), "input_sizes", L({1, 5, 4, 5, 2})));
  s.Add("Conv3DBackpropFilterV2", "SAME stride 1",
        {R({1, 3, 3, 3, 1}, 362), R({1, 3, 3, 3, 2}, 363)},
        With(Window(one, "SAME", one), "filter_sizes", L({2, 2, 2, 1, 2})));
  s.Add("Conv3DBackpropFilterV2", "VALID dilation 2",
        {R({1, 4, 4, 4, 1}, 364), R({1, 2, 2, 2, 1}, 365)},
        With(Window(one, "VALID", two), "filter_sizes", L({2, 2, 2, 1, 1})));
}

void AddDilation(SampleList& s) {
  const auto one = L({1, 1, 1, 1}), two = L({1, 2, 2, 1});
  s.Add("Dilation2D", "SAME stride 1",
        {R({1, 4, 4, 2}, 370), R({2, 2, 2}, 371)},
        DilationWindow(one, "SAME", one));
  s.Add("Dilation2D", "VALID stride 2, batch 2",
        {R({2, 5, 5, 1}, 372), R({3, 2, 1}, 373)},
        DilationWindow(two, "VALID", one));
  s.Add("Dilation2D", "SAME rates 2", {R({1, 4, 4, 1}, 374), R({2, 2, 1}, 375)},
        DilationWindow(one, "SAME", two));
  // Input, filter, and a tensor of the output / input / filter shape.
  const std::vector<Tensor> base = {R({1, 4, 4, 2}, 376), R({2, 2, 2}, 377)};
  auto with = [&](Tensor third) {
    std::vector<Tensor> in = base;
    in.push_back(third);
    return in;
  };
  const AttrMap same = DilationWindow(one, "SAME", one);
  const AttrMap strided = DilationWindow(two, "VALID", one);
  s.Add("Dilation2DBackpropInput", "SAME", with(R({1, 4, 4, 2}, 378)), same);
  s.Add("Dilation2DBackpropInput", "VALID stride 2", with(R({1, 2, 2, 2}, 379)),
        strided);
  s.Add("Dilation2DBackpropFilter", "SAME", with(R({1, 4, 4, 2}, 380)), same);
  s.Add("Dilation2DBackpropFilter", "VALID stride 2",
        with(R({1, 2, 2, 2}, 381)), strided);
  s.Add("Dilation2DBackpropInputGrad", "SAME", with(R({1, 4, 4, 2}, 382)),
        same);
  s.Add("Dilation2DBackpropInputGrad", "VALID stride 2",
        with(R({1, 4, 4, 2}, 383)), strided);
  s.Add("Dilation2DBackpropFilterGrad", "SAME", with(R({2, 2, 2}, 384)), same);
  s.Add("Dilation2DBackpropFilterGrad", "VALID rates 2",
        with(R({2, 2, 2}, 385)), DilationWindow(one, "VALID", two));
}

}  // namespace

// padding EXPLICIT: H padded by (1, 2), W by (0, 1): [1, 4, 3, C] with a
// 3x2 filter gives [1, 5, 3, O]; with (2, 0), (1, 1), a 2x2 filter and
// stride 2, [1, 5, 5, C] gives [1, 3, 3, O].
AttrMap Explicit(std::vector<int64_t> strides, std::vector<int64_t> paddings) {
  AttrMap attrs = Window(std::move(strides), "EXPLICIT", L({1, 1, 1, 1}));
  attrs.Set("explicit_paddings", std::move(paddings));
  return attrs;
}

void AddExplicitPadding(SampleList& s) {
  const AttrMap p1 = Explicit(L({1, 1, 1, 1}), L({0, 0, 1, 2, 0, 1, 0, 0}));
  const AttrMap p2 = Explicit(L({1, 2, 2, 1}), L({0, 0, 2, 0, 1, 1, 0, 0}));
  s.Add("Conv2D", "EXPLICIT", {R({1, 4, 3, 2}, 360), R({3, 2, 2, 2}, 361)}, p1);
  s.Add("Conv2D", "EXPLICIT stride 2",
        {R({1, 5, 5, 1}, 362), R({2, 2, 1, 2}, 363)}, p2);
  s.Add("Conv2DBackpropInput", "EXPLICIT",
        {R({3, 2, 2, 2}, 364), R({1, 5, 3, 2}, 365)},
        With(p1, "input_sizes", L({1, 4, 3, 2})));
  s.Add("Conv2DBackpropInput", "EXPLICIT stride 2",
        {R({2, 2, 1, 2}, 366), R({1, 3, 3, 2}, 367)},
        With(p2, "input_sizes", L({1, 5, 5, 1})));
  s.Add("Conv2DBackpropFilter", "EXPLICIT",
        {R({1, 4, 3, 2}, 368), R({1, 5, 3, 2}, 369)},
        With(p1, "filter_sizes", L({3, 2, 2, 2})));
  s.Add("DepthwiseConv2dNative", "EXPLICIT multiplier 2",
        {R({1, 4, 3, 2}, 370), R({3, 2, 2, 2}, 371)}, p1);
  s.Add("DepthwiseConv2dNativeBackpropInput", "EXPLICIT multiplier 2",
        {R({3, 2, 2, 2}, 372), R({1, 5, 3, 4}, 373)},
        With(p1, "input_sizes", L({1, 4, 3, 2})));
  s.Add("DepthwiseConv2dNativeBackpropFilter", "EXPLICIT multiplier 2",
        {R({1, 4, 3, 2}, 374), R({1, 5, 3, 4}, 375)},
        With(p1, "filter_sizes", L({3, 2, 2, 2})));
  s.Add("DepthwiseConv2dNativeBackpropFilter", "EXPLICIT stride 2",
        {R({1, 5, 5, 1}, 376), R({1, 3, 3, 2}, 377)},
        With(p2, "filter_sizes", L({2, 2, 1, 2})));
}

// The inputs of a convolution op that follow its data_format.
std::vector<int> ConvActivations(const std::string& op) {
  if (op.find("BackpropInput") != std::string::npos) return {1};
  if (op.find("BackpropFilter") != std::string::npos) return {0, 1};
  return {0};
}

void AddConvSamples(SampleList& s) {
  // Every convolution sample also runs channels-first (NCHW / NCDHW).
  SampleList channels_last;
  AddConv2D(channels_last);
  AddExplicitPadding(channels_last);
  AddDepthwise(channels_last);
  AddConv3D(channels_last);
  AddWithChannelsFirstTwins(s, std::move(channels_last), ConvActivations);
  AddDilation(s);  // no data_format (NHWC), as in TensorFlow
}

}  // namespace gradtape::testing
