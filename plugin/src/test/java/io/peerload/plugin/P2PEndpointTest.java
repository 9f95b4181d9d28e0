package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;
import org.pytorch.serve.servingsdk.Context;
import org.pytorch.serve.servingsdk.Model;
import org.pytorch.serve.servingsdk.annotations.Endpoint;
import org.pytorch.serve.servingsdk.annotations.helpers.EndpointTypes;
import org.pytorch.serve.servingsdk.http.Request;
import org.pytorch.serve.servingsdk.http.Response;

/** The SDK adapter: annotation, routing, and JSON on every path (outside TorchServe, so registration fails loudly). */
class P2PEndpointTest {
  static final class Req implements Request {
    final String uri;
    final Map<String, List<String>> params;

    Req(String uri, Map<String, List<String>> params) {
      this.uri = uri;
      this.params = params;
    }

    @Override
    public List<String> getHeaderNames() {
      return new ArrayList<>();
    }

    @Override
    public String getRequestURI() {
      return uri;
    }

    @Override
    public Map<String, List<String>> getParameterMap() {
      return params;
    }

    @Override
    public List<String> getParameter(String k) {
      return params.get(k);
    }

    @Override
    public String getContentType() {
      return null;
    }

    @Override
    public InputStream getInputStream() {
      return InputStream.nullInputStream();
    }
  }

  static final class Rsp implements Response {
    int status = 200;
    String contentType;
    final Map<String, String> headers = new HashMap<>();
    final ByteArrayOutputStream body = new ByteArrayOutputStream();

    @Override
    public void setStatus(int s) {
      status = s;
    }

    @Override
    public void setStatus(int s, String reason) {
      status = s;
    }

    @Override
    public void setHeader(String k, String v) {
      headers.put(k, v);
    }

    @Override
    public void addHeader(String k, String v) {
      headers.put(k, v);
    }

    @Override
    public void setContentType(String t) {
      contentType = t;
    }

    @Override
    public OutputStream getOutputStream() {
      return body;
    }

    JsonObject json() {
      return JsonParser.parseString(body.toString(StandardCharsets.UTF_8)).getAsJsonObject();
    }
  }

  static final Context CTX = new Context() {
    @Override
    public Properties getConfig() {
      Properties p = new Properties();
      p.setProperty("model_store", System.getProperty("java.io.tmpdir"));
      return p;
    }

    @Override
    public Map<String, Model> getModels() {
      return Collections.emptyMap();
    }
  };

  @Test
  void annotatedAsTheManagementEndpointP2p() {
    Endpoint e = P2PEndpoint.class.getAnnotation(Endpoint.class);
    assertEquals("p2p", e.urlPattern());
    assertEquals(EndpointTypes.MANAGEMENT, e.endpointType());
  }

  @Test
  void everyAnswerIsJson() throws Exception {
    P2PEndpoint ep = new P2PEndpoint();

    Rsp get = new Rsp();
    ep.doGet(new Req("/p2p/models", Collections.emptyMap()), get, CTX);
    assertEquals(405, get.status);
    assertEquals("application/json", get.contentType);
    assertEquals("POST", get.headers.get("Allow"));
    assertTrue(get.json().has("Status"));

    Rsp wrong = new Rsp();
    ep.doPost(new Req("/p2p/other?x=1", Collections.emptyMap()), wrong, CTX);
    assertEquals(404, wrong.status);
    assertTrue(wrong.json().get("Status").getAsString().contains("/p2p/other"));

    Map<String, List<String>> url = new HashMap<>();
    url.put("url", Collections.singletonList("https://example.com/m.mar"));
    Rsp bad = new Rsp();
    ep.doPost(new Req("/p2p/models?url=https://example.com/m.mar", url), bad, CTX);
    assertEquals(400, bad.status);
    assertEquals("application/json", bad.contentType);

    // Outside TorchServe there is no configuration and no ApiUtils: a clear 500, still JSON.
    Map<String, List<String>> ok = new HashMap<>();
    ok.put("file_name", Collections.singletonList("m.mar"));
    Rsp fail = new Rsp();
    ep.doPost(new Req("/p2p/models?file_name=m.mar", ok), fail, CTX);
    assertEquals(500, fail.status);
    assertTrue(fail.json().get("Status").getAsString().length() > 0);
  }

  @Test
  void serviceFileNamesTheEndpoint() throws Exception {
    try (InputStream in = getClass().getResourceAsStream(
        "/META-INF/services/org.pytorch.serve.servingsdk.ModelServerEndpoint")) {
      assertEquals(P2PEndpoint.class.getName(), new String(in.readAllBytes(), StandardCharsets.UTF_8).trim());
    }
  }
}
