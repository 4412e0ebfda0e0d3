// Reference ImageDecoder: BMP, PNM and baseline uncompressed TIFF decoded here; JPEG (libjpeg),
// PNG (libpng) and WebP (libwebp) when built with KILN_WITH_LIBJPEG / _LIBPNG / _LIBWEBP.
// As the spec says, an image that cannot be decoded gives an empty [0, 0, C] output.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ref/image_decode.h"

#ifdef KILN_WITH_LIBJPEG
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
#endif
#ifdef KILN_WITH_LIBPNG
#include <png.h>
#endif
#ifdef KILN_WITH_LIBWEBP
#include <webp/decode.h>
#endif

namespace kiln {
namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 28;

bool sized(Image* img, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0 || w > (1 << 20) || h > (1 << 20) || w * h > kMaxPixels) return false;
  img->width = w;
  img->height = h;
  img->rgb.assign(static_cast<size_t>(w * h * 3), 0);
  return true;
}

uint32_t le(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t be(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// ---- BMP: BITMAPINFOHEADER, uncompressed 24/32-bit or 8-bit paletted ----
bool decode_bmp(const uint8_t* d, size_t n, Image* img) {
  if (n < 54 || d[0] != 'B' || d[1] != 'M') return false;
  const uint32_t offset = le(d + 10, 4);
  const uint32_t header = le(d + 14, 4);
  if (header < 40 || 14 + static_cast<size_t>(header) > n) return false;
  const auto w = static_cast<int32_t>(le(d + 18, 4));
  const auto h = static_cast<int32_t>(le(d + 22, 4));
  const uint32_t bpp = le(d + 28, 2);
  const uint32_t compression = le(d + 30, 4);
  if (compression != 0 || (bpp != 24 && bpp != 32 && bpp != 8)) return false;
  const bool bottom_up = h > 0;
  const int64_t height = bottom_up ? h : -static_cast<int64_t>(h);
  if (!sized(img, w, height)) return false;
  const int64_t stride = ((static_cast<int64_t>(w) * bpp + 31) / 32) * 4;
  if (offset > n || static_cast<int64_t>(n - offset) < stride * height) return false;
  const uint8_t* palette = d + 14 + header;
  uint32_t colors = le(d + 46, 4);
  if (bpp == 8) {
    if (colors == 0) colors = 256;
    if (14 + static_cast<size_t>(header) + 4 * static_cast<size_t>(colors) > n) return false;
  }
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = d + offset + (bottom_up ? height - 1 - y : y) * stride;
    uint8_t* out = img->rgb.data() + y * w * 3;
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t* px;
      if (bpp == 8) {
        if (row[x] >= colors) return false;
        px = palette + 4 * row[x];
      } else {
        px = row + x * (bpp / 8);
      }
      out[x * 3 + 0] = px[2];  // stored as BGR(A)
      out[x * 3 + 1] = px[1];
      out[x * 3 + 2] = px[0];
    }
  }
  return true;
}

// ---- PNM: binary P5 (gray) and P6 (RGB), maxval up to 65535 ----
bool decode_pnm(const uint8_t* d, size_t n, Image* img) {
  if (n < 3 || d[0] != 'P' || (d[1] != '5' && d[1] != '6')) return false;
  size_t i = 2;
  int64_t fields[3];
  for (int64_t& f : fields) {
    while (i < n && (std::isspace(d[i]) || d[i] == '#')) {
      if (d[i] == '#')
        while (i < n && d[i] != '\n') ++i;
      else
        ++i;
    }
    if (i >= n || !std::isdigit(d[i])) return false;
    f = 0;
    while (i < n && std::isdigit(d[i]) && f < (1 << 24)) f = f * 10 + (d[i++] - '0');
  }
  if (i >= n || !std::isspace(d[i])) return false;
  ++i;  // exactly one whitespace before the raster
  const int64_t w = fields[0], h = fields[1], maxval = fields[2];
  if (maxval < 1 || maxval > 65535 || !sized(img, w, h)) return false;
  const int channels = d[1] == '6' ? 3 : 1;
  const int bytes = maxval > 255 ? 2 : 1;
  if (static_cast<int64_t>(n - i) < w * h * channels * bytes) return false;
  const uint8_t* p = d + i;
  for (int64_t k = 0; k < w * h; ++k) {
    for (int c = 0; c < 3; ++c) {
      const int64_t s = k * channels + (channels == 3 ? c : 0);
      const uint32_t v = bytes == 2 ? be(p + 2 * s, 2) : p[s];
      img->rgb[k * 3 + c] = static_cast<uint8_t>((v * 255 + maxval / 2) / maxval);
    }
  }
  return true;
}

// ---- TIFF: baseline, uncompressed, 8-bit chunky RGB or grayscale, strips ----
bool decode_tiff(const uint8_t* d, size_t n, Image* img) {
  if (n < 8) return false;
  const bool little = d[0] == 'I' && d[1] == 'I';
  if (!little && !(d[0] == 'M' && d[1] == 'M')) return false;
  auto rd = [&](size_t off, int bytes) -> uint32_t { return little ? le(d + off, bytes) : be(d + off, bytes); };
  if (rd(2, 2) != 42) return false;
  const uint32_t ifd = rd(4, 4);
  if (ifd + 2 > n) return false;
  const uint32_t entries = rd(ifd, 2);
  if (ifd + 2 + 12 * static_cast<size_t>(entries) > n) return false;
  int64_t w = 0, h = 0, spp = 1, compression = 1, photometric = -1, planar = 1, rows_per_strip = -1;
  std::vector<uint32_t> offsets, counts, bits;
  auto values = [&](size_t entry) -> std::vector<uint32_t> {
    const uint32_t type = rd(entry + 2, 2), count = rd(entry + 4, 4);
    const int size = type == 3 ? 2 : type == 4 ? 4 : type == 1 ? 1 : 0;
    std::vector<uint32_t> out;
    if (size == 0 || count > (1u << 20)) return out;
    const size_t total = static_cast<size_t>(size) * count;
    const size_t base = total <= 4 ? entry + 8 : rd(entry + 8, 4);
    if (base + total > n) return out;
    for (uint32_t k = 0; k < count; ++k) out.push_back(rd(base + k * size, size));
    return out;
  };
  for (uint32_t e = 0; e < entries; ++e) {
    const size_t entry = ifd + 2 + 12 * static_cast<size_t>(e);
    const uint32_t tag = rd(entry, 2);
    std::vector<uint32_t> v = values(entry);
    if (v.empty()) continue;
    switch (tag) {
      case 256: w = v[0]; break;
      case 257: h = v[0]; break;
      case 258: bits = v; break;
      case 259: compression = v[0]; break;
      case 262: photometric = v[0]; break;
      case 273: offsets = v; break;
      case 277: spp = v[0]; break;
      case 278: rows_per_strip = v[0]; break;
      case 279: counts = v; break;
      case 284: planar = v[0]; break;
      default: break;
    }
  }
  if (compression != 1 || planar != 1 || offsets.empty() || offsets.size() != counts.size()) return false;
  for (uint32_t b : bits)
    if (b != 8) return false;
  const bool rgb = photometric == 2 && spp >= 3;
  const bool gray = (photometric == 0 || photometric == 1) && spp >= 1;
  if (!rgb && !gray) return false;
  if (!sized(img, w, h)) return false;
  if (rows_per_strip <= 0 || rows_per_strip > h) rows_per_strip = h;
  const int64_t row_bytes = w * spp;
  for (int64_t y = 0; y < h; ++y) {
    const size_t strip = static_cast<size_t>(y / rows_per_strip);
    if (strip >= offsets.size()) return false;
    const int64_t in_strip = (y % rows_per_strip) * row_bytes;
    if (in_strip + row_bytes > counts[strip] || offsets[strip] + static_cast<size_t>(in_strip + row_bytes) > n) return false;
    const uint8_t* row = d + offsets[strip] + in_strip;
    for (int64_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        uint8_t v = row[x * spp + (rgb ? c : 0)];
        if (gray && photometric == 0) v = static_cast<uint8_t>(255 - v);  // WhiteIsZero
        img->rgb[(y * w + x) * 3 + c] = v;
      }
    }
  }
  return true;
}

#ifdef KILN_WITH_LIBJPEG
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};
void jpeg_fail(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<JpegError*>(cinfo->err)->jump, 1); }
void jpeg_quiet(j_common_ptr, int) {}

// No C++ objects with destructors live in this frame across setjmp/longjmp.
bool decode_jpeg(const uint8_t* d, size_t n, Image* img) {
  if (n < 3 || d[0] != 0xFF || d[1] != 0xD8) return false;
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_quiet;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, d, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3 || !sized(img, cinfo.output_width, cinfo.output_height)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * cinfo.output_width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}
#endif

#ifdef KILN_WITH_LIBPNG
bool decode_png(const uint8_t* d, size_t n, Image* img) {
  if (n < 8 || png_sig_cmp(d, 0, 8) != 0) return false;
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, d, n)) return false;
  image.format = PNG_FORMAT_RGB;
  if (!sized(img, image.width, image.height)) {
    png_image_free(&image);
    return false;
  }
  if (!png_image_finish_read(&image, nullptr, img->rgb.data(), 0, nullptr)) {
    png_image_free(&image);
    return false;
  }
  return true;
}
#endif

#ifdef KILN_WITH_LIBWEBP
bool decode_webp(const uint8_t* d, size_t n, Image* img) {
  if (n < 12 || std::memcmp(d, "RIFF", 4) != 0 || std::memcmp(d + 8, "WEBP", 4) != 0) return false;
  int w = 0, h = 0;
  if (!WebPGetInfo(d, n, &w, &h) || !sized(img, w, h)) return false;
  return WebPDecodeRGBInto(d, n, img->rgb.data(), img->rgb.size(), w * 3) != nullptr;
}
#endif

}  // namespace

bool decode_image(const uint8_t* d, size_t n, Image* img) {
  if (decode_bmp(d, n, img) || decode_pnm(d, n, img) || decode_tiff(d, n, img)) return true;
#ifdef KILN_WITH_LIBJPEG
  if (decode_jpeg(d, n, img)) return true;
#endif
#ifdef KILN_WITH_LIBPNG
  if (decode_png(d, n, img)) return true;
#endif
#ifdef KILN_WITH_LIBWEBP
  if (decode_webp(d, n, img)) return true;
#endif
  return false;
}

namespace {

Status image_decoder(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("encoded_stream is required");
  const Tensor& data = ctx.input(0);
  if (data.dtype() != DType::kUInt8 || data.rank() != 1)
    return ctx.error("encoded_stream must be a 1-D uint8 tensor, got " + shape_str(data.shape()));
  const std::string format = ctx.node.attr_string("pixel_format", "RGB");
  if (format != "RGB" && format != "BGR" && format != "Grayscale")
    return ctx.error("pixel_format must be RGB, BGR or Grayscale, got '" + format + "'");
  const int64_t channels = format == "Grayscale" ? 1 : 3;
  Image img;
  if (!decode_image(data.data<uint8_t>(), static_cast<size_t>(data.numel()), &img)) {
    KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kUInt8, {0, 0, channels}));
    (void)y;
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, DType::kUInt8, {img.height, img.width, channels}));
  uint8_t* out = y->data<uint8_t>();
  const int64_t pixels = img.width * img.height;
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* p = img.rgb.data() + i * 3;
    if (format == "RGB") {
      out[i * 3] = p[0], out[i * 3 + 1] = p[1], out[i * 3 + 2] = p[2];
    } else if (format == "BGR") {
      out[i * 3] = p[2], out[i * 3 + 1] = p[1], out[i * 3 + 2] = p[0];
    } else {
      // ITU-R 601-2 luma in 16-bit fixed point, rounded.
      out[i] = static_cast<uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "ImageDecoder", image_decoder);

}  // namespace kiln
