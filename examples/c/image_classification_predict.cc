/* Image classification on MXNet's C predict API, in the style of MXNet's own example
 * (example/image-classification/predict-cpp/image-classification-predict.cc): read the symbol JSON and the
 * .params as bytes, MXPredCreate, set the image, MXPredForward, print the top classes. It knows nothing of mxcc:
 * it includes <mxnet/c_predict_api.h> and links any library that implements it, libmxnet or one that mxcc
 * compiled for the network:
 *
 *   mxcc compile model-symbol.json --shape data=1,3,224,224 -o build/model
 *   c++ -O2 examples/c/image_classification_predict.cc -I build/model/include build/model/libmodel.a -fopenmp -lm \
 *       -o image_classification_predict
 *   ./image_classification_predict model-symbol.json model-0000.params cat.ppm [--synset synset.txt]
 *
 * Unlike MXNet's example it needs no OpenCV: the image is a binary PPM (P6, 8-bit RGB; `convert cat.jpg cat.ppm`),
 * resized to the input by nearest neighbour. Options: --width/--height (224), --batch (1; every item gets the
 * image), --mean FILE.nd (a mean image, read with MXNDListCreate) or --mean-rgb R,G,B and --std-rgb R,G,B
 * (per-channel normalization, default 0 and 1), --synset FILE (one label per line), --top K (5),
 * --dump FILE (the raw float32 output). */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <mxnet/c_predict_api.h>

// A whole file in memory (MXNet's example calls it BufferFile).
class BufferFile {
 public:
  explicit BufferFile(const std::string &path) : path_(path) {
    std::ifstream in(path, std::ios::in | std::ios::binary);
    if (!in) {
      std::cerr << "Can't open the file: " << path << std::endl;
      std::exit(1);
    }
    buffer_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    buffer_.push_back('\0');   // the symbol JSON is passed as a C string
  }
  int GetLength() const { return static_cast<int>(buffer_.size()) - 1; }
  const char *GetBuffer() const { return buffer_.data(); }

 private:
  std::string path_;
  std::vector<char> buffer_;
};

static void Check(int rc, const char *what) {
  if (rc != 0) {
    std::cerr << what << " failed: " << MXGetLastError() << std::endl;
    std::exit(1);
  }
}

struct Image {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;   // height x width x 3
};

static std::string PpmToken(std::istream &in) {
  std::string tok;
  while (in >> tok && tok[0] == '#') {
    std::string rest;
    std::getline(in, rest);   // a comment runs to the end of its line
  }
  return tok;
}

static Image ReadPpm(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  Image im;
  if (!in || PpmToken(in) != "P6") {
    std::cerr << path << ": not a binary PPM (P6) image" << std::endl;
    std::exit(1);
  }
  im.width = std::atoi(PpmToken(in).c_str());
  im.height = std::atoi(PpmToken(in).c_str());
  const int maxval = std::atoi(PpmToken(in).c_str());
  in.get();   // the one whitespace byte before the pixels
  im.rgb.resize(static_cast<size_t>(im.width) * im.height * 3);
  if (im.width <= 0 || im.height <= 0 || maxval != 255 ||
      !in.read(reinterpret_cast<char *>(im.rgb.data()), static_cast<std::streamsize>(im.rgb.size()))) {
    std::cerr << path << ": not an 8-bit PPM, or truncated" << std::endl;
    std::exit(1);
  }
  return im;
}

static std::vector<float> ParseTriple(const char *text) {
  std::vector<float> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    v.push_back(std::strtof(item.c_str(), nullptr));
  if (v.size() != 3) {
    std::cerr << "expected R,G,B, got " << text << std::endl;
    std::exit(1);
  }
  return v;
}

// The image as one CHW float input item: resized (nearest), minus the mean, divided by std.
static std::vector<float> Preprocess(const Image &im, int width, int height, const std::vector<float> &mean_image,
                                     const std::vector<float> &mean_rgb, const std::vector<float> &std_rgb) {
  std::vector<float> out(static_cast<size_t>(3) * width * height);
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < height; y++)
      for (int x = 0; x < width; x++) {
        const int sy = static_cast<int>(static_cast<long>(y) * im.height / height);
        const int sx = static_cast<int>(static_cast<long>(x) * im.width / width);
        const size_t at = (static_cast<size_t>(c) * height + y) * width + x;
        const float pixel = im.rgb[(static_cast<size_t>(sy) * im.width + sx) * 3 + c];
        const float mean = mean_image.empty() ? mean_rgb[c] : mean_image[at];
        out[at] = (pixel - mean) / std_rgb[c];
      }
  return out;
}

static std::vector<std::string> LoadSynset(const char *path) {
  std::vector<std::string> labels;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    labels.push_back(line);
  return labels;
}

static const char *Option(int argc, char **argv, const char *flag, const char *dflt) {
  for (int i = 4; i + 1 < argc; i++)
    if (!std::strcmp(argv[i], flag))
      return argv[i + 1];
  return dflt;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " SYMBOL.json PARAMS IMAGE.ppm [--width 224] [--height 224] [--batch 1]"
              << " [--mean FILE.nd | --mean-rgb R,G,B] [--std-rgb R,G,B] [--synset FILE] [--top 5] [--dump FILE]"
              << std::endl;
    return 2;
  }
  const int width = std::atoi(Option(argc, argv, "--width", "224"));
  const int height = std::atoi(Option(argc, argv, "--height", "224"));
  const int batch = std::atoi(Option(argc, argv, "--batch", "1"));
  const int top = std::atoi(Option(argc, argv, "--top", "5"));
  BufferFile json_data(argv[1]);
  BufferFile param_data(argv[2]);
  const Image image = ReadPpm(argv[3]);

  // the mean: an image from an NDArray file (as MXNet's example's mean_224.nd), or per channel
  std::vector<float> mean_image, mean_rgb = ParseTriple(Option(argc, argv, "--mean-rgb", "0,0,0"));
  const std::vector<float> std_rgb = ParseTriple(Option(argc, argv, "--std-rgb", "1,1,1"));
  if (const char *mean_file = Option(argc, argv, "--mean", nullptr)) {
    BufferFile nd(mean_file);
    NDListHandle nd_list = nullptr;
    mx_uint nd_len = 0, nd_ndim = 0;
    const char *nd_key = nullptr;
    const mx_float *nd_data = nullptr;
    const mx_uint *nd_shape = nullptr;
    Check(MXNDListCreate(nd.GetBuffer(), nd.GetLength(), &nd_list, &nd_len), "MXNDListCreate");
    Check(MXNDListGet(nd_list, 0, &nd_key, &nd_data, &nd_shape, &nd_ndim), "MXNDListGet");
    mean_image.assign(nd_data, nd_data + static_cast<size_t>(3) * width * height);
    MXNDListFree(nd_list);
  }

  // the predictor: device 1 (CPU), one input "data" of shape (batch, 3, height, width)
  const char *input_keys[1] = {"data"};
  const mx_uint input_shape_indptr[2] = {0, 4};
  const mx_uint input_shape_data[4] = {static_cast<mx_uint>(batch), 3, static_cast<mx_uint>(height),
                                       static_cast<mx_uint>(width)};
  PredictorHandle pred_hnd = nullptr;
  Check(MXPredCreate(json_data.GetBuffer(), param_data.GetBuffer(), param_data.GetLength(), 1, 0, 1, input_keys,
                     input_shape_indptr, input_shape_data, &pred_hnd), "MXPredCreate");

  const std::vector<float> item = Preprocess(image, width, height, mean_image, mean_rgb, std_rgb);
  std::vector<float> input;
  for (int b = 0; b < batch; b++)
    input.insert(input.end(), item.begin(), item.end());
  Check(MXPredSetInput(pred_hnd, "data", input.data(), static_cast<mx_uint>(input.size())), "MXPredSetInput");
  Check(MXPredForward(pred_hnd), "MXPredForward");

  mx_uint *shape = nullptr, shape_len = 0;
  Check(MXPredGetOutputShape(pred_hnd, 0, &shape, &shape_len), "MXPredGetOutputShape");
  size_t size = 1;
  for (mx_uint i = 0; i < shape_len; i++)
    size *= shape[i];
  std::vector<float> output(size);
  Check(MXPredGetOutput(pred_hnd, 0, output.data(), static_cast<mx_uint>(size)), "MXPredGetOutput");
  MXPredFree(pred_hnd);

  if (const char *dump = Option(argc, argv, "--dump", nullptr)) {
    std::ofstream out(dump, std::ios::binary);
    out.write(reinterpret_cast<const char *>(output.data()), static_cast<std::streamsize>(size * sizeof(float)));
  }
  // the first item's top classes
  const size_t classes = size / static_cast<size_t>(batch);
  const char *synset_path = Option(argc, argv, "--synset", nullptr);
  const std::vector<std::string> synset = synset_path ? LoadSynset(synset_path) : std::vector<std::string>();
  std::vector<size_t> order(classes);
  for (size_t i = 0; i < classes; i++)
    order[i] = i;
  const size_t k = std::min(classes, static_cast<size_t>(top > 0 ? top : 1));
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                    [&](size_t a, size_t b) { return output[a] > output[b]; });
  for (size_t i = 0; i < k; i++) {
    const size_t id = order[i];
    std::printf("%s: id = %zu, score = %.6f%s%s\n", i == 0 ? "Best Result" : "           ", id,
                static_cast<double>(output[id]), synset.size() > id ? ", " : "",
                synset.size() > id ? synset[id].c_str() : "");
  }
  return 0;
}
